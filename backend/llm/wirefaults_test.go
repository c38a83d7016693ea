package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

// Gemini 3 models put a thoughtSignature on the functionCall parts they
// make and refuse the next request of the tool round unless each comes
// back on its call ("Function call is missing a thought_signature in
// functionCall parts", 400). It was dropped: every tool round on such a
// model failed on its second call, after the tools had run.
func TestGeminiToolCallKeepsItsThoughtSignature(t *testing.T) {
	t.Parallel()
	var second []byte
	srv, calls := wireServer(t, geminiWire, func(call int, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "", `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"web_search","args":{"query":"parley"}},"thoughtSignature":"c2lnLTE="},{"functionCall":{"name":"web_search","args":{"query":"pricing"}}}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5},"modelVersion":"gemini-3-pro-preview"}`)
	})
	m := geminiWire.newModel(srv.URL)
	req := llm.Request{Model: "gemini-1.5-pro", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}},
		Tools: []llm.Tool{{Name: "web_search", Parameters: map[string]any{"type": "object"}}}}
	_, got, _, err := collect(t, m, req)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.EqualValues(t, 1, calls.Load())

	// The round's next request carries each call with its signature.
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		second, _ = io.ReadAll(r.Body)
		geminiWire.text(w, []string{"ok"}, 1, 1)
	}))
	t.Cleanup(srv2.Close)
	req.Messages = append(req.Messages,
		llm.Message{Role: llm.RoleAssistant, ToolCalls: got},
		llm.Message{Role: llm.RoleTool, ToolResults: []llm.ToolResult{{CallID: got[0].ID, Name: "web_search", Content: "a"}, {CallID: got[1].ID, Name: "web_search", Content: "b"}}})
	_, _, _, err = collect(t, geminiWire.newModel(srv2.URL), req)
	require.NoError(t, err)
	var body struct {
		Contents []struct {
			Role  string
			Parts []struct {
				FunctionCall     *struct{ Name string } `json:"functionCall"`
				ThoughtSignature string                 `json:"thoughtSignature"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(second, &body))
	require.Len(t, body.Contents, 3)
	model := body.Contents[1]
	require.Equal(t, "model", model.Role)
	require.Len(t, model.Parts, 2)
	require.NotNil(t, model.Parts[0].FunctionCall)
	require.Equal(t, "c2lnLTE=", model.Parts[0].ThoughtSignature, "the signature goes back on its call: %s", second)
	require.Empty(t, model.Parts[1].ThoughtSignature, "a call without one gets none")
}

// Gemini refuses a prompt its filters block with a chunk carrying
// promptFeedback.blockReason and no candidate. That was taken for a
// stream cut before its finish reason: retried (the same refusal each
// time) and told to the client as an unavailable provider.
func TestGeminiBlockedPromptIsNotRetried(t *testing.T) {
	t.Parallel()
	srv, calls := wireServer(t, geminiWire, func(_ int, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "", `{"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[{"category":"HARM_CATEGORY_HARASSMENT","probability":"HIGH"}]},"usageMetadata":{"promptTokenCount":10,"totalTokenCount":10},"modelVersion":"gemini-1.5-pro"}`)
	})
	text, _, _, err := collect(t, geminiWire.newModel(srv.URL), llm.Request{Model: "gemini-1.5-pro", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
	require.Empty(t, text)
	var pe *llm.ProviderError
	require.ErrorAs(t, err, &pe)
	require.False(t, pe.Retryable(), "%v", pe)
	require.Contains(t, pe.Error(), "SAFETY")
	require.EqualValues(t, 1, calls.Load(), "a blocked prompt is blocked again")
}

// Gemini's OpenAI-compatible endpoint streams parallel tool calls each
// whole, with its own id, all at index 0. They were joined into one call,
// its name the names run together and its arguments the objects back to
// back, which no tool could run: every parallel call was lost.
func TestOpenAIParallelCallsAtOneIndexStayApart(t *testing.T) {
	t.Parallel()
	srv, _ := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
		streamHeaders(w)
		chunk(w, `{"role":"assistant","tool_calls":[{"index":0,"id":"function-call-1","type":"function","function":{"name":"web_search","arguments":"{\"query\":\"a\"}"}}]}`, "")
		chunk(w, `{"role":"assistant","tool_calls":[{"index":0,"id":"function-call-2","type":"function","function":{"name":"lead_capture","arguments":"{\"email\":\"a@b.c\"}"}}]}`, "")
		finish(w, "tool_calls")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	_, calls, _, err := collect(t, newOpenAI(srv.URL), basicReq)
	require.NoError(t, err)
	require.Equal(t, []llm.ToolCall{
		{ID: "function-call-1", Name: "web_search", Arguments: `{"query":"a"}`},
		{ID: "function-call-2", Name: "lead_capture", Arguments: `{"email":"a@b.c"}`},
	}, calls)
}

// Gemini sends a call of a function without parameters (request_human)
// without args. Its arguments read "null", shown in the tool_call event
// and stored so, where the other providers give {}.
func TestGeminiCallWithoutArgsHasAnEmptyObject(t *testing.T) {
	t.Parallel()
	srv, _ := wireServer(t, geminiWire, func(_ int, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "", `{"candidates":[{"content":{"parts":[{"text":"One moment."},{"functionCall":{"name":"request_human"}}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5}}`)
	})
	text, calls, _, err := collect(t, geminiWire.newModel(srv.URL), llm.Request{Model: "gemini-1.5-pro", Messages: []llm.Message{{Role: llm.RoleUser, Content: "a person please"}},
		Tools: []llm.Tool{{Name: "request_human", Parameters: map[string]any{"type": "object"}}}})
	require.NoError(t, err)
	require.Equal(t, "One moment.", text)
	require.Equal(t, []llm.ToolCall{{Name: "request_human", Arguments: "{}"}}, calls)
}

// Some OpenAI-compatible servers (MiniMax models through NVIDIA NIM)
// repeat a call's whole name, and its id, in every fragment of its
// arguments. The names were joined ("web_searchweb_search"): the kit knew
// no such tool, and every call of such a server failed.
func TestOpenAIToolCallNameRepeatedInEachFragment(t *testing.T) {
	t.Parallel()
	srv, _ := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
		streamHeaders(w)
		chunk(w, `{"role":"assistant","content":"Checking. "}`, "")
		chunk(w, `{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"web_search","arguments":"{\"query\":"}}]}`, "")
		chunk(w, `{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"lead_capture","arguments":"{\"email\""}}]}`, "")
		chunk(w, `{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"web_search","arguments":"\"parley\"}"}}]}`, "")
		chunk(w, `{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"lead_capture","arguments":":\"a@b.c\"}"}}]}`, "")
		// A name sent in pieces is joined, as the SDK's accumulator does.
		chunk(w, `{"tool_calls":[{"index":2,"id":"call_3","type":"function","function":{"name":"request_","arguments":""}}]}`, "")
		chunk(w, `{"tool_calls":[{"index":2,"function":{"name":"human","arguments":"{}"}}]}`, "")
		finish(w, "tool_calls")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	text, calls, _, err := collect(t, newOpenAI(srv.URL), basicReq)
	require.NoError(t, err)
	require.Equal(t, "Checking. ", text)
	require.Equal(t, []llm.ToolCall{
		{ID: "call_1", Name: "web_search", Arguments: `{"query":"parley"}`},
		{ID: "call_2", Name: "lead_capture", Arguments: `{"email":"a@b.c"}`},
		{ID: "call_3", Name: "request_human", Arguments: `{}`},
	}, calls)
}

// Ollama's OpenAI-compatible /v1/chat/completions reads the reply's bound
// from max_tokens only (its ChatCompletionRequest has no
// max_completion_tokens): a server of the models file (docs/models.md's
// own example is Ollama) got no bound at all, and a reply ran to the
// model's end or the context's. A provider of the file that says
// "maxTokens" gets it in both fields; the others, and OpenAI's own API,
// only in max_completion_tokens (OpenAI's reasoning models, and servers in
// front of them, refuse max_tokens).
func TestCompatibleServerGetsTheBoundInMaxTokens(t *testing.T) {
	t.Parallel()
	srv, bodies := recordingServer(t)
	env := func(k string) string {
		return map[string]string{"PARLEY_OPENAI_API_KEY": "sk-test", "PARLEY_OPENAI_BASE_URL": srv.URL + "/v1"}[k]
	}
	c, err := llm.LoadCatalog(llm.CatalogConfig{Env: env, File: modelsFile(t, `{
		"providers": {"ollama": {"type": "openai", "baseURL": "`+srv.URL+`/v1", "maxTokens": true}, "azure": {"type": "openai", "baseURL": "`+srv.URL+`/v1"}},
		"models": {"gpt-4o": {"provider": "ollama", "model": "llama3.2"}, "o3": {"provider": "azure", "model": "o3"}}}`)})
	require.NoError(t, err)
	req := llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}, MaxTokens: 700}

	r := c.Resolve("gpt-4o")
	req.Model = r.Upstream
	text, _, _, err := collect(t, r.Model, req)
	require.NoError(t, err)
	require.Equal(t, "ok", text)
	body := <-bodies
	require.EqualValues(t, 700, body["max_tokens"], "the bound Ollama reads: %v", body)
	require.EqualValues(t, 700, body["max_completion_tokens"])

	for _, name := range []string{"gpt-4o-mini", "o3"} {
		r = c.Resolve(name)
		req.Model = r.Upstream
		_, _, _, err = collect(t, r.Model, req)
		require.NoError(t, err)
		body = <-bodies
		require.NotContains(t, body, "max_tokens", "%s: OpenAI's reasoning models refuse max_tokens", name)
		require.EqualValues(t, 700, body["max_completion_tokens"], name)
	}
}

// A tool call the model left unfinished (cut at its bound: finish_reason
// "length") or malformed goes back in the round's next request. Ollama
// parses each call's arguments and refuses the request when they are not
// JSON (400 "invalid tool call arguments"), so the turn failed after its
// tools ran. They are sent as the other providers get them: a JSON
// object, {} when the model's was none.
func TestOpenAIUnfinishedToolCallArgumentsGoBackAsJSON(t *testing.T) {
	t.Parallel()
	srv, calls := openAIServer(t, func(_ int, w http.ResponseWriter, body map[string]any) {
		for _, m := range body["messages"].([]any) {
			tcs, _ := m.(map[string]any)["tool_calls"].([]any)
			for _, c := range tcs {
				var args map[string]any
				raw := c.(map[string]any)["function"].(map[string]any)["arguments"].(string)
				if json.Unmarshal([]byte(raw), &args) != nil {
					// Ollama's openai.FromCompletionToolCall.
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(400)
					fmt.Fprint(w, `{"error":{"message":"invalid tool call arguments","type":"invalid_request_error","param":null,"code":null}}`)
					return
				}
			}
		}
		streamHeaders(w)
		chunk(w, `{"role":"assistant","content":"Sorry, once more."}`, "")
		finish(w, "stop")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	req := basicReq
	req.Messages = append(req.Messages[:len(req.Messages):len(req.Messages)],
		llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "web_search", Arguments: `{"query":"par`}, {ID: "call_2", Name: "request_human", Arguments: ``}}},
		llm.Message{Role: llm.RoleTool, ToolResults: []llm.ToolResult{{CallID: "call_1", Name: "web_search", Content: "bad arguments", IsError: true}, {CallID: "call_2", Name: "request_human", Content: "bad arguments", IsError: true}}})
	text, _, _, err := collect(t, newOpenAI(srv.URL), req)
	require.NoError(t, err)
	require.Equal(t, "Sorry, once more.", text)
	require.EqualValues(t, 1, calls.Load())
}

// A request the provider refuses (400) is refused again: each provider's
// is tried once.
func TestEveryProviderDoesNotRetryABadRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		newModel   func(string) llm.Model
	}{
		{"openai", `{"error":{"message":"bad","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, newOpenAI},
		{"anthropic", `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`, anthropicWire.newModel},
		{"gemini", `{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT"}}`, geminiWire.newModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(400)
				fmt.Fprint(w, tc.body)
			}))
			t.Cleanup(srv.Close)
			_, _, _, err := collect(t, tc.newModel(srv.URL), llm.Request{Model: "gemini-1.5-pro", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
			var pe *llm.ProviderError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, 400, pe.Status)
			require.EqualValues(t, 1, calls.Load())
		})
	}
}

// recordingServer is an OpenAI-compatible server that answers "ok" and
// hands over each request's body.
func recordingServer(t *testing.T) (*httptest.Server, <-chan map[string]any) {
	t.Helper()
	bodies := make(chan map[string]any, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		bodies <- m
		streamHeaders(w)
		chunk(w, `{"role":"assistant","content":"ok"}`, "")
		finish(w, "stop")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv, bodies
}

// A character cut between two text deltas (a gateway's chunking) reached
// the turn as two tokens that are not UTF-8: a Connect stream cannot encode
// such a token, and the stream failed. The cut character goes out whole,
// with the next delta; bytes that are no UTF-8 at all come out as U+FFFD,
// as encoding/json gives them for the other providers.
func TestAnthropicTokensAreValidUTF8(t *testing.T) {
	t.Parallel()
	srv, _ := wireServer(t, anthropicWire, func(_ int, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":3,"output_tokens":1}}}`)
		sse(w, "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		for _, d := range []string{"caf\xc3", "\xa9 o", "k \xff!", "\xe2\x82"} {
			sse(w, "content_block_delta", "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""+d+"\"}}")
		}
		sse(w, "content_block_stop", `{"type":"content_block_stop","index":0}`)
		sse(w, "message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`)
		sse(w, "message_stop", `{"type":"message_stop"}`)
	})
	req := llm.Request{Model: "claude", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}
	var text strings.Builder
	err := anthropicWire.newModel(srv.URL).Stream(context.Background(), req, func(ev llm.Event) error {
		require.True(t, utf8.ValidString(ev.Text), "token %q", ev.Text)
		text.WriteString(ev.Text)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "café ok \uFFFD!\uFFFD", text.String())
}
