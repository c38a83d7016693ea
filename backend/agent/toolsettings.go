package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/netguard"
	"github.com/parleyhq/parley/backend/seal"
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
			// The schema refuses CR, LF and NUL; the HTTP client refuses
			// every other control character but a tab, at each call.
			if !tool.ValidHeaderValue(e.GetHeaders()[name]) {
				return apperr.InvalidField(fmt.Sprintf("%s.headers[%q]", field, name), "must not contain control characters (a tab is allowed)")
			}
		}
	}
	return nil
}

// owner is the agent whose tool settings are stored, and the sealer of
// their header values (nil without --secrets-key).
type owner struct {
	sealer     *seal.Sealer
	org, agent uuid.UUID
}

// toolSettings turns the request's settings into what is stored, each
// header value sealed (tool.SealHeader): without a secrets key no header
// can be configured. Header values are write-only: an empty one keeps the
// value stored for the same endpoint (by name) and header, so that a
// client may send back what it read; with none stored it is refused. A
// stored value is kept only while the endpoint's URL keeps its origin
// (scheme, host and port): whoever may update the agent has not
// necessarily seen the value, and must not be able to point it at a host
// of their own. A kept value keeps its sealed form, which stays bound to
// the same endpoint name, origin and header (it is not opened here); a
// legacy plain one (tool.Endpoint.Legacy) is sealed.
func toolSettings(ps *parleyv1.ToolSettings, stored tool.Settings, o owner) ([]byte, error) {
	var s tool.Settings
	for i, e := range ps.GetHttpRequest().GetEndpoints() {
		field := fmt.Sprintf("%s[%d].headers", endpointsField, i)
		ep := tool.Endpoint{Name: e.GetName(), Description: e.GetDescription(), Method: e.GetMethod(), URL: e.GetUrl()}
		if ep.Method == "" {
			ep.Method = "GET"
		}
		var before tool.Endpoint
		if j := slices.IndexFunc(stored.HTTPRequest.Endpoints, func(o tool.Endpoint) bool { return o.Name == ep.Name }); j >= 0 {
			before = stored.HTTPRequest.Endpoints[j]
		}
		for _, name := range slices.Sorted(maps.Keys(e.GetHeaders())) {
			// SECURITY: header values are stored sealed, never in plain
			// text.
			if o.sealer == nil {
				return nil, apperr.InvalidField(field, "header %s cannot be stored: header values are stored sealed, and this server has no secrets key (its operator sets --secrets-key or PARLEY_SECRETS_KEY)", name)
			}
			if ep.Sealed == nil {
				ep.Sealed = map[string][]byte{}
			}
			v := e.GetHeaders()[name]
			if v == "" {
				kept, sealed := before.Sealed[name]
				legacy, plain := before.Legacy[name]
				if !sealed && !plain {
					return nil, apperr.InvalidField(field, "header %s needs a value", name)
				}
				// SECURITY: a stored value goes only to the origin it was
				// given for.
				if tool.Origin(before.URL) != tool.Origin(ep.URL) {
					return nil, apperr.InvalidField(field, "header %s needs its value again: the endpoint's URL changed origin (scheme, host or port) from %s to %s", name, tool.Origin(before.URL), tool.Origin(ep.URL))
				}
				if sealed {
					ep.Sealed[name] = kept
					continue
				}
				v = legacy
			}
			sealed, err := tool.SealHeader(o.sealer, o.org, o.agent, ep, name, v)
			if err != nil {
				return nil, err
			}
			ep.Sealed[name] = sealed
		}
		s.HTTPRequest.Endpoints = append(s.HTTPRequest.Endpoints, ep)
	}
	return json.Marshal(s)
}

// sealLegacy returns an agent's stored settings with the plain header
// values of rows stored before values were sealed (tool.Endpoint.Legacy)
// sealed; nil when there are none, or no sealer to seal them with. Every
// update of an agent calls it, so such a value stays in plain text only
// until the agent's next update.
func sealLegacy(stored tool.Settings, o owner) ([]byte, error) {
	if o.sealer == nil {
		return nil, nil
	}
	changed := false
	for i := range stored.HTTPRequest.Endpoints {
		e := &stored.HTTPRequest.Endpoints[i]
		for _, name := range slices.Sorted(maps.Keys(e.Legacy)) {
			changed = true
			if _, ok := e.Sealed[name]; ok {
				continue
			}
			sealed, err := tool.SealHeader(o.sealer, o.org, o.agent, *e, name, e.Legacy[name])
			if err != nil {
				return nil, err
			}
			if e.Sealed == nil {
				e.Sealed = map[string][]byte{}
			}
			e.Sealed[name] = sealed
		}
		e.Legacy = nil
	}
	if !changed {
		return nil, nil
	}
	return json.Marshal(stored)
}

// toolSettingsProto is the stored settings as replies show them: header
// names with empty values.
func toolSettingsProto(s tool.Settings) *parleyv1.ToolSettings {
	out := &parleyv1.ToolSettings{HttpRequest: &parleyv1.HttpRequestSettings{}}
	for _, e := range s.HTTPRequest.Endpoints {
		pe := &parleyv1.HttpEndpoint{Name: e.Name, Description: e.Description, Method: e.Method, Url: e.URL}
		for _, name := range e.HeaderNames() {
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
