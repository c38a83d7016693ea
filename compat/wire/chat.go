package wire

import (
	"encoding/json"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// chatBody is a v2 (and v1) chat request. Fields Parley does not use, such
// as Chaindesk's temperature, modelName, systemPrompt or maxTokens, are
// accepted and ignored; a known field of the wrong type is a 400 naming it.
type chatBody struct {
	Query          *string          `json:"query"`
	Message        *string          `json:"message"`
	ConversationID *string          `json:"conversationId"`
	VisitorID      *string          `json:"visitorId"`
	Streaming      *bool            `json:"streaming"`
	Channel        *string          `json:"channel"`
	Contact        *contactBody     `json:"contact"`
	Filters        *filtersBody     `json:"filters"`
	Attachments    []attachmentBody `json:"attachments"`
	SelectedModel  *string          `json:"selectedModel"`
}

type contactBody struct {
	Email        string         `json:"email"`
	FirstName    string         `json:"firstName"`
	LastName     string         `json:"lastName"`
	PhoneNumber  string         `json:"phoneNumber"`
	CustomFields map[string]any `json:"customFields"`
}

type filtersBody struct {
	DatasourceIDs []string `json:"datasourceIds"`
}

type attachmentBody struct {
	URL  string `json:"url"`
	Name string `json:"name"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

// DecodeChat turns a chat body into a ChatRequest, and says whether the body
// asked for streaming (nil: it did not say).
func DecodeChat(agentID string, body []byte) (*parleyv1.ChatRequest, *bool, error) {
	if len(strings.TrimSpace(string(body))) == 0 {
		return nil, nil, apperr.InvalidField("body", "empty; send a JSON object with query and conversationId")
	}
	if err := CheckText(body); err != nil {
		return nil, nil, err
	}
	var b chatBody
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, nil, JSONError(body, err)
	}
	req := &parleyv1.ChatRequest{
		AgentId: agentID, Query: deref(b.Query), ConversationId: deref(b.ConversationID),
		VisitorId: deref(b.VisitorID), Channel: deref(b.Channel), SelectedModel: deref(b.SelectedModel),
	}
	if b.Query == nil && b.Message != nil {
		req.Query = *b.Message
	}
	if c := b.Contact; c != nil {
		req.Contact = &parleyv1.Contact{Email: c.Email, FirstName: c.FirstName, LastName: c.LastName, PhoneNumber: c.PhoneNumber}
		if c.CustomFields != nil {
			s, err := structpb.NewStruct(c.CustomFields)
			if err != nil {
				return nil, nil, apperr.InvalidField("contact.customFields", "must be an object of JSON values")
			}
			req.Contact.CustomFields = s
		}
	}
	if b.Filters != nil {
		req.Filters = &parleyv1.ChatFilters{DatasourceIds: b.Filters.DatasourceIDs}
	}
	for _, a := range b.Attachments {
		req.Attachments = append(req.Attachments, &parleyv1.Attachment{Url: a.URL, Name: a.Name, Type: a.Type, Size: a.Size})
	}
	return req, b.Streaming, nil
}

// SourceJSON is a chat source as the REST API's JSON and SSE replies (and
// the console's playground, which speaks them) carry it.
func SourceJSON(s *parleyv1.Source) map[string]any {
	return map[string]any{
		"source": s.GetSource(), "score": s.GetScore(), "datasourceName": s.GetDatasourceName(),
		"datasourceId": s.GetDatasourceId(), "chunk": s.GetChunk(), "title": s.GetTitle(), "url": s.GetUrl(),
		"excerpt": s.GetExcerpt(), "heading": s.GetHeading(),
	}
}
