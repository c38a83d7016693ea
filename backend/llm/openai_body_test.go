package llm

import (
	"encoding/json"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/require"
)

// sdkParams is the request as the SDK's own types build it: the reference
// openAIBody is held to.
func sdkParams(req Request) openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{
		Model:               req.Model,
		MaxCompletionTokens: openai.Int(MaxOutputTokens),
		Temperature:         openai.Float(req.Temperature),
		StreamOptions:       openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if sys := systemWithKnowledge(req); sys != "" {
		params.Messages = append(params.Messages, openai.SystemMessage(sys))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleAssistant:
			if len(m.ToolCalls) == 0 {
				params.Messages = append(params.Messages, openai.AssistantMessage(m.Content))
				continue
			}
			var msg openai.ChatCompletionAssistantMessageParam
			if m.Content != "" {
				msg.Content.OfString = openai.String(m.Content)
			}
			for _, c := range m.ToolCalls {
				msg.ToolCalls = append(msg.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Arguments},
					},
				})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &msg})
		case RoleTool:
			for _, r := range m.ToolResults {
				params.Messages = append(params.Messages, openai.ToolMessage(r.Content, r.CallID))
			}
		default:
			if len(m.Images) == 0 {
				params.Messages = append(params.Messages, openai.UserMessage(m.Content))
				continue
			}
			parts := []openai.ChatCompletionContentPartUnionParam{openai.TextContentPart(m.Content)}
			for _, img := range m.Images {
				parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: img.DataURL()}))
			}
			params.Messages = append(params.Messages, openai.UserMessage(parts))
		}
	}
	for _, t := range req.Tools {
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: t.Name, Description: openai.String(t.Description), Parameters: t.Parameters,
		}))
	}
	return params
}

// sdkBody is what the SDK sends for req: its params' JSON with "stream"
// set, as NewStreaming does.
func sdkBody(t testing.TB, req Request) map[string]any {
	b, err := json.Marshal(sdkParams(req))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	m["stream"] = true
	return m
}

// A turn with every kind of message: knowledge, images, an assistant's
// tool calls with and without text, their results, tools with and without
// parameters, text that JSON escapes, and zero values (temperature 0, an
// empty question). A turn always has a message (the SDK would leave out an
// empty list, openAIBody sends []).
var fullRequest = Request{
	Model: "gpt-4o-mini", System: "Be brief. <b>\"quoted\"</b> & \u2028", Temperature: 0,
	Knowledge: []Passage{{Source: "Returns policy", Text: "Refunds within 30 days."}},
	Messages: []Message{
		{Role: RoleUser, Content: "what is in this picture?", Images: []Image{{MIMEType: "image/png", Data: []byte("\x89PNG\r\n\x1a\n")}, {MIMEType: "image/webp", Data: []byte("RIFF\x00\x00\x00\x00WEBPVP")}}},
		{Role: RoleAssistant, Content: "A cat."},
		{Role: RoleUser, Content: ""},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "web_search", Arguments: `{"query":"cats"}`}, {ID: "call_2", Name: "lookup", Arguments: "{}"}}},
		{Role: RoleTool, ToolResults: []ToolResult{{CallID: "call_1", Name: "web_search", Content: "Cats are mammals."}, {CallID: "call_2", Name: "lookup", Content: "", IsError: true}}},
		{Role: RoleAssistant, Content: "Let me check.", ToolCalls: []ToolCall{{ID: "call_3", Name: "lookup", Arguments: `{"id":7}`}}},
		{Role: RoleTool, ToolResults: []ToolResult{{CallID: "call_3", Content: "found"}}},
		{Role: RoleUser, Content: "thanks \x7f\u00e9"},
	},
	Tools: []Tool{
		{Name: "web_search", Description: "Search the web.", Parameters: map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}, "required": []any{"query"}}},
		{Name: "lookup", Description: ""},
	},
}

func TestOpenAIBodyIsTheSDKs(t *testing.T) {
	t.Parallel()
	for name, req := range map[string]Request{
		"every kind": fullRequest,
		"plain":      {Model: "gpt-4o", System: "s", Temperature: 0.7, Messages: []Message{{Role: RoleUser, Content: "hi"}}},
		"no system":  {Model: "m", Temperature: 1.25, Messages: []Message{{Role: RoleUser, Content: "hi"}, {Role: RoleAssistant, Content: ""}}},
		"images only, a tool without parameters": {Model: "m", Messages: []Message{{Role: RoleUser, Images: []Image{{MIMEType: "image/jpeg", Data: []byte{0xff, 0xd8, 0xff}}}}},
			Tools: []Tool{{Name: "now", Parameters: map[string]any{}}}},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := openAIBody(req)
			require.NoError(t, err)
			var got map[string]any
			require.NoError(t, json.Unmarshal(b, &got))
			require.Equal(t, sdkBody(t, req), got)
		})
	}
}

// BenchmarkOpenAIBody encodes a turn's request, once per model call: the
// SDK's params (built and marshalled as Post did, then "stream" set) and
// openAIBody.
func BenchmarkOpenAIBody(b *testing.B) {
	req := fullRequest
	req.Temperature = 0.3
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(sdkParams(req)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("openAIBody", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := openAIBody(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
