package llm_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

// A second call after a tool ran carries the assistant's tool call and the
// tool's result in each provider's own form: OpenAI's tool_calls and "tool"
// messages, Anthropic's tool_use and tool_result blocks, Gemini's
// functionCall and functionResponse parts.
func TestToolResultsInEachProvidersWireFormat(t *testing.T) {
	t.Parallel()
	req := llm.Request{Model: "gemini-1.5-pro", System: "Be brief.", Messages: []llm.Message{
		{Role: llm.RoleUser, Content: "When do you open?"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "datastore_query", Arguments: `{"query":"opening hours"}`}}},
		{Role: llm.RoleTool, ToolResults: []llm.ToolResult{{CallID: "call_1", Name: "datastore_query", Content: "[1] hours.md: we open at nine"}}},
	}}
	openAIWire := wire{
		name: "openai", path: "/v1/chat/completions",
		newModel: newOpenAI,
		text: func(w http.ResponseWriter, pieces []string, _, _ int) {
			streamHeaders(w)
			for _, p := range pieces {
				chunk(w, `{"content":`+jsonStr(p)+`}`, "")
			}
			finish(w, "stop")
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		},
	}
	checks := map[string]func(t *testing.T, body map[string]any){
		"openai": func(t *testing.T, body map[string]any) {
			msgs := body["messages"].([]any)
			require.Len(t, msgs, 4) // system, user, assistant, tool
			assistant, _ := json.Marshal(msgs[2])
			require.JSONEq(t, `{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"datastore_query","arguments":"{\"query\":\"opening hours\"}"}}]}`, string(assistant))
			tool, _ := json.Marshal(msgs[3])
			require.JSONEq(t, `{"role":"tool","tool_call_id":"call_1","content":"[1] hours.md: we open at nine"}`, string(tool))
		},
		"anthropic": func(t *testing.T, body map[string]any) {
			msgs := body["messages"].([]any)
			require.Len(t, msgs, 3)
			assistant, _ := json.Marshal(msgs[1])
			require.JSONEq(t, `{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"datastore_query","input":{"query":"opening hours"}}]}`, string(assistant))
			result, _ := json.Marshal(msgs[2])
			require.JSONEq(t, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","is_error":false,"content":[{"type":"text","text":"[1] hours.md: we open at nine"}]}]}`, string(result))
			// No tools are offered for this call, but the messages hold
			// tool_use blocks: Anthropic refuses such a request unless
			// tools are defined, so the called ones are, and may not be
			// called.
			defined, _ := json.Marshal(body["tools"])
			require.JSONEq(t, `[{"name":"datastore_query","input_schema":{"type":"object","properties":{}}}]`, string(defined))
			choice, _ := json.Marshal(body["tool_choice"])
			require.JSONEq(t, `{"type":"none"}`, string(choice))
		},
		"gemini": func(t *testing.T, body map[string]any) {
			contents := body["contents"].([]any)
			require.Len(t, contents, 3)
			call, _ := json.Marshal(contents[1])
			require.JSONEq(t, `{"role":"model","parts":[{"functionCall":{"id":"call_1","name":"datastore_query","args":{"query":"opening hours"}}}]}`, string(call))
			resp, _ := json.Marshal(contents[2])
			require.JSONEq(t, `{"role":"user","parts":[{"functionResponse":{"id":"call_1","name":"datastore_query","response":{"output":"[1] hours.md: we open at nine"}}}]}`, string(resp))
		},
	}
	for _, wr := range []wire{openAIWire, anthropicWire, geminiWire} {
		t.Run(wr.name, func(t *testing.T) {
			t.Parallel()
			var body map[string]any
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if err := json.Unmarshal(b, &body); err != nil {
					t.Errorf("request body: %v", err)
				}
				wr.text(w, []string{"We open at nine."}, 30, 5)
			}))
			t.Cleanup(srv.Close)
			text, _, _, err := collect(t, wr.newModel(srv.URL), req)
			require.NoError(t, err)
			require.Equal(t, "We open at nine.", text)
			checks[wr.name](t, body)
		})
	}
}

// Claude may say nothing but a line break before its tool calls. Given
// back as a text block, Anthropic refuses the round's next request
// ("text content blocks must contain non-whitespace text", 400): the turn
// failed after its tools had run.
func TestAnthropicGetsNoBlankTextBesideToolCalls(t *testing.T) {
	t.Parallel()
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		anthropicWire.text(w, []string{"We open at nine."}, 30, 5)
	}))
	t.Cleanup(srv.Close)
	req := llm.Request{Model: "claude", Messages: []llm.Message{
		{Role: llm.RoleUser, Content: "When do you open?"},
		{Role: llm.RoleAssistant, Content: "\n\n", ToolCalls: []llm.ToolCall{{ID: "toolu_1", Name: "datastore_query", Arguments: `{"query":"hours"}`}}},
		{Role: llm.RoleTool, ToolResults: []llm.ToolResult{{CallID: "toolu_1", Name: "datastore_query", Content: "we open at nine"}}},
	}}
	_, _, _, err := collect(t, anthropicWire.newModel(srv.URL), req)
	require.NoError(t, err)
	var sent struct {
		Messages []struct {
			Role    string
			Content []map[string]any
		}
	}
	require.NoError(t, json.Unmarshal(body, &sent))
	require.Len(t, sent.Messages, 3)
	assistant, _ := json.Marshal(sent.Messages[1].Content)
	require.JSONEq(t, `[{"type":"tool_use","id":"toolu_1","name":"datastore_query","input":{"query":"hours"}}]`, string(assistant))
}
