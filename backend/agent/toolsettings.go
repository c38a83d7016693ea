package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/netguard"
	"github.com/parleyhq/parley/backend/tool"
)

// endpointsField is the schema's path of http_request's endpoints.
const endpointsField = "tool_settings.http_request.endpoints"

// checkToolSettings applies the rules the schema cannot: each endpoint's
// URL must be one the guard would fetch (a public address, or a range the
// operator opened with --fetch-allow; names are resolved now, and every
// call is checked again when it dials), and headers the HTTP client owns
// cannot be set. It runs before the transaction: resolving may take a
// moment.
func checkToolSettings(ctx context.Context, guard *netguard.Client, ps *parleyv1.ToolSettings) error {
	for i, e := range ps.GetHttpRequest().GetEndpoints() {
		field := fmt.Sprintf("%s[%d]", endpointsField, i)
		if guard == nil {
			return apperr.InvalidField(field, "this server sends no outbound requests")
		}
		// SECURITY: no endpoint at a private, loopback or metadata address.
		if err := guard.CheckDestination(ctx, e.GetUrl()); err != nil {
			return apperr.InvalidField(field+".url", "%s is not allowed: %v (an operator may open a private range with --fetch-allow)", e.GetUrl(), err)
		}
		for _, name := range slices.Sorted(maps.Keys(e.GetHeaders())) {
			if tool.ForbiddenHeader(name) {
				return apperr.InvalidField(field+".headers", "%s is set by Parley and cannot be configured", name)
			}
		}
	}
	return nil
}

// toolSettings turns the request's settings into what is stored. Header
// values are write-only: an empty one keeps the value stored for the same
// endpoint (by name) and header, so that a client may send back what it
// read; with none stored it is refused. A stored value is kept only while
// the endpoint's URL keeps its origin (scheme, host and port): whoever may
// update the agent has not necessarily seen the value, and must not be able
// to point it at a host of their own.
func toolSettings(ps *parleyv1.ToolSettings, stored tool.Settings) ([]byte, error) {
	var s tool.Settings
	for i, e := range ps.GetHttpRequest().GetEndpoints() {
		field := fmt.Sprintf("%s[%d].headers", endpointsField, i)
		ep := tool.Endpoint{Name: e.GetName(), Description: e.GetDescription(), Method: e.GetMethod(), URL: e.GetUrl()}
		if ep.Method == "" {
			ep.Method = "GET"
		}
		var before *tool.Endpoint
		if j := slices.IndexFunc(stored.HTTPRequest.Endpoints, func(o tool.Endpoint) bool { return o.Name == ep.Name }); j >= 0 {
			before = &stored.HTTPRequest.Endpoints[j]
		}
		for _, name := range slices.Sorted(maps.Keys(e.GetHeaders())) {
			v := e.GetHeaders()[name]
			if v == "" {
				var old string
				var ok bool
				if before != nil {
					old, ok = before.Headers[name]
				}
				if !ok {
					return nil, apperr.InvalidField(field, "header %s needs a value", name)
				}
				// SECURITY: a stored value goes only to the origin it was
				// given for.
				if tool.Origin(before.URL) != tool.Origin(ep.URL) {
					return nil, apperr.InvalidField(field, "header %s needs its value again: the endpoint's URL changed origin (scheme, host or port) from %s to %s", name, tool.Origin(before.URL), tool.Origin(ep.URL))
				}
				v = old
			}
			if ep.Headers == nil {
				ep.Headers = map[string]string{}
			}
			ep.Headers[name] = v
		}
		s.HTTPRequest.Endpoints = append(s.HTTPRequest.Endpoints, ep)
	}
	return json.Marshal(s)
}

// toolSettingsProto is the stored settings as replies show them: header
// names with empty values.
func toolSettingsProto(s tool.Settings) *parleyv1.ToolSettings {
	out := &parleyv1.ToolSettings{HttpRequest: &parleyv1.HttpRequestSettings{}}
	for _, e := range s.HTTPRequest.Endpoints {
		pe := &parleyv1.HttpEndpoint{Name: e.Name, Description: e.Description, Method: e.Method, Url: e.URL}
		for name := range e.Headers {
			if pe.Headers == nil {
				pe.Headers = map[string]string{}
			}
			// SECURITY: header values are write-only.
			pe.Headers[name] = ""
		}
		out.HttpRequest.Endpoints = append(out.HttpRequest.Endpoints, pe)
	}
	return out
}
