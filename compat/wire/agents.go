package wire

import (
	"encoding/json"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// agentBody is the writable part of an agent in a create or update body.
// Read-only fields (id, createdAt, ...) are accepted so that a client may PUT
// back what it read, and are never used: ids, organizations and timestamps
// are the server's. Any other field is refused.
type agentBody struct {
	Name           *string           `json:"name"`
	Description    *string           `json:"description"`
	Instructions   *string           `json:"instructions"`
	Model          *string           `json:"model"`
	Temperature    *float64          `json:"temperature"`
	Tools          *[]string         `json:"tools"`
	Visibility     *string           `json:"visibility"`
	Datastores     *[]string         `json:"datastores"`
	HandoffMessage *string           `json:"handoffMessage"`
	ToolSettings   *ToolSettingsJSON `json:"toolSettings"`
	AllowedOrigins *[]string         `json:"allowedOrigins"`

	ID        json.RawMessage `json:"id"`
	Status    json.RawMessage `json:"status"`
	CreatedAt json.RawMessage `json:"createdAt"`
	UpdatedAt json.RawMessage `json:"updatedAt"`
	Stats     json.RawMessage `json:"stats"`
	Warnings  json.RawMessage `json:"warnings"`
}

// ToolSettingsJSON is an agent's toolSettings as REST bodies carry them:
// keyed by tool name, snake_case as in tools.
type ToolSettingsJSON struct {
	HTTPRequest *HTTPRequestJSON `json:"http_request"`
}

// HTTPRequestJSON is http_request's settings.
type HTTPRequestJSON struct {
	Endpoints []EndpointJSON `json:"endpoints"`
}

// EndpointJSON is one endpoint; in replies, header values are empty.
type EndpointJSON struct {
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Method      string            `json:"method"`
	URL         string            `json:"url"`
	Headers     map[string]string `json:"headers"`
}

// Proto is the settings as the schema has them.
func (t *ToolSettingsJSON) Proto() *parleyv1.ToolSettings {
	if t == nil {
		return nil
	}
	out := &parleyv1.ToolSettings{}
	if t.HTTPRequest != nil {
		out.HttpRequest = &parleyv1.HttpRequestSettings{}
		for _, e := range t.HTTPRequest.Endpoints {
			out.HttpRequest.Endpoints = append(out.HttpRequest.Endpoints, &parleyv1.HttpEndpoint{
				Name: e.Name, Description: e.Description, Method: e.Method, Url: e.URL, Headers: e.Headers,
			})
		}
	}
	return out
}

// ToolSettingsOf is an agent's settings as replies show them: every
// tool's key present, header values as the service gave them (empty).
func ToolSettingsOf(s *parleyv1.ToolSettings) ToolSettingsJSON {
	out := ToolSettingsJSON{HTTPRequest: &HTTPRequestJSON{Endpoints: []EndpointJSON{}}}
	for _, e := range s.GetHttpRequest().GetEndpoints() {
		headers := e.GetHeaders()
		if headers == nil {
			headers = map[string]string{}
		}
		out.HTTPRequest.Endpoints = append(out.HTTPRequest.Endpoints, EndpointJSON{
			Name: e.GetName(), Description: e.GetDescription(), Method: e.GetMethod(), URL: e.GetUrl(), Headers: headers,
		})
	}
	return out
}

func decodeAgentBody(body []byte) (*agentBody, error) {
	var b agentBody
	if err := DecodeStrict(body, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// DecodeCreateAgent turns a POST /agents body into a CreateAgentRequest.
func DecodeCreateAgent(body []byte) (*parleyv1.CreateAgentRequest, error) {
	b, err := decodeAgentBody(body)
	if err != nil {
		return nil, err
	}
	req := &parleyv1.CreateAgentRequest{
		Name: deref(b.Name), Description: deref(b.Description), Instructions: deref(b.Instructions),
		Model: b.Model, Temperature: b.Temperature, Visibility: b.Visibility, ToolSettings: b.ToolSettings.Proto(),
	}
	req.HandoffMessage = b.HandoffMessage
	if b.Tools != nil {
		req.Tools = *b.Tools
	}
	if b.Datastores != nil {
		req.Datastores = *b.Datastores
	}
	if b.AllowedOrigins != nil {
		req.AllowedOrigins = *b.AllowedOrigins
	}
	return req, nil
}

// DecodeUpdateAgent turns a PUT /agents/{id} body into an UpdateAgentRequest
// whose mask names exactly the fields present (null counts as absent).
func DecodeUpdateAgent(id string, body []byte) (*parleyv1.UpdateAgentRequest, error) {
	b, err := decodeAgentBody(body)
	if err != nil {
		return nil, err
	}
	req := &parleyv1.UpdateAgentRequest{
		Id: id, Name: b.Name, Description: b.Description, Instructions: b.Instructions,
		Model: b.Model, Temperature: b.Temperature, Visibility: b.Visibility, ToolSettings: b.ToolSettings.Proto(),
		UpdateMask: &fieldmaskpb.FieldMask{},
	}
	add := func(present bool, path string) {
		if present {
			req.UpdateMask.Paths = append(req.UpdateMask.Paths, path)
		}
	}
	add(b.Name != nil, "name")
	add(b.Description != nil, "description")
	add(b.Instructions != nil, "instructions")
	add(b.Model != nil, "model")
	add(b.Temperature != nil, "temperature")
	add(b.Tools != nil, "tools")
	add(b.Visibility != nil, "visibility")
	add(b.Datastores != nil, "datastores")
	add(b.HandoffMessage != nil, "handoff_message")
	add(b.ToolSettings != nil, "tool_settings")
	add(b.AllowedOrigins != nil, "allowed_origins")
	req.HandoffMessage = b.HandoffMessage
	if b.Tools != nil {
		req.Tools = *b.Tools
	}
	if b.Datastores != nil {
		req.Datastores = *b.Datastores
	}
	if b.AllowedOrigins != nil {
		req.AllowedOrigins = *b.AllowedOrigins
	}
	if len(req.UpdateMask.Paths) == 0 {
		return nil, apperr.InvalidField("body", "names no field to update (writable: name, description, instructions, model, temperature, tools, visibility, datastores, handoffMessage, toolSettings, allowedOrigins)")
	}
	return req, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
