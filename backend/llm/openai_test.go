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
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

// openAIServer speaks chat.completions streaming (SSE of chat.completion.chunk
// objects, then data: [DONE]) as OpenAI does. script decides each call.
func openAIServer(t *testing.T, script func(call int, w http.ResponseWriter, body map[string]any)) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		if got := r.Header.Get("Authorization"); got != "Bearer sk-test" {
			t.Errorf("Authorization = %q", got)
		}
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("request body: %v", err)
		}
		script(int(calls.Add(1)), w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func chunk(w http.ResponseWriter, delta string, extra string) {
	fmt.Fprintf(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":%s,"finish_reason":null}]%s}`+"\n\n", delta, extra)
	w.(http.Flusher).Flush()
}

// finish ends a choice as OpenAI does, with its finish reason.
func finish(w http.ResponseWriter, reason string) {
	fmt.Fprintf(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":%q}]}`+"\n\n", reason)
	w.(http.Flusher).Flush()
}

func streamHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
}

func collect(t *testing.T, m llm.Model, req llm.Request) (text string, calls []llm.ToolCall, usage *llm.Usage, err error) {
	t.Helper()
	err = m.Stream(context.Background(), req, func(ev llm.Event) error {
		text += ev.Text
		if ev.ToolCall != nil {
			calls = append(calls, *ev.ToolCall)
		}
		if ev.Usage != nil {
			usage = ev.Usage
		}
		return nil
	})
	return
}

func newOpenAI(url string) llm.Model {
	return llm.Retry(llm.NewOpenAI(llm.OpenAIConfig{APIKey: "sk-test", BaseURL: url + "/v1"}), 3, 10*time.Millisecond, 2*time.Second)
}

var basicReq = llm.Request{
	Model: "gpt-4o-mini", System: "Be brief.", Temperature: 0.3,
	Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}, {Role: llm.RoleAssistant, Content: "hello"}, {Role: llm.RoleUser, Content: "how are you?"}},
}

func TestOpenAITextAndUsage(t *testing.T) {
	t.Parallel()
	srv, _ := openAIServer(t, func(_ int, w http.ResponseWriter, body map[string]any) {
		if body["stream"] != true || body["model"] != "gpt-4o-mini" || body["temperature"] != 0.3 {
			t.Errorf("request: %v", body)
		}
		msgs := body["messages"].([]any)
		if len(msgs) != 4 || msgs[0].(map[string]any)["role"] != "system" || msgs[2].(map[string]any)["content"] != "hello" {
			t.Errorf("messages: %v", msgs)
		}
		streamHeaders(w)
		chunk(w, `{"role":"assistant","content":""}`, "")
		chunk(w, `{"content":"Fine"}`, "")
		chunk(w, `{"content":", thanks."}`, "")
		finish(w, "stop")
		fmt.Fprint(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":21,"completion_tokens":4,"total_tokens":25}}`+"\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	text, calls, usage, err := collect(t, newOpenAI(srv.URL), basicReq)
	require.NoError(t, err)
	require.Equal(t, "Fine, thanks.", text)
	require.Empty(t, calls)
	require.Equal(t, &llm.Usage{PromptTokens: 21, CompletionTokens: 4}, usage)
}

func TestOpenAIToolCalls(t *testing.T) {
	t.Parallel()
	srv, _ := openAIServer(t, func(_ int, w http.ResponseWriter, body map[string]any) {
		tools := body["tools"].([]any)
		require.Len(t, tools, 1)
		streamHeaders(w)
		chunk(w, `{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"web_search","arguments":""}}]}`, "")
		chunk(w, `{"tool_calls":[{"index":0,"function":{"arguments":"{\"query\":"}}]}`, "")
		chunk(w, `{"tool_calls":[{"index":0,"function":{"arguments":"\"parley\"}"}}]}`, "")
		finish(w, "tool_calls")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	req := basicReq
	req.Tools = []llm.Tool{{Name: "web_search", Description: "search", Parameters: map[string]any{"type": "object"}}}
	_, calls, _, err := collect(t, newOpenAI(srv.URL), req)
	require.NoError(t, err)
	require.Equal(t, []llm.ToolCall{{ID: "call_1", Name: "web_search", Arguments: `{"query":"parley"}`}}, calls)
}

func TestOpenAIRetriesA429HonouringRetryAfter(t *testing.T) {
	t.Parallel()
	var first time.Time
	srv, calls := openAIServer(t, func(call int, w http.ResponseWriter, _ map[string]any) {
		if call == 1 {
			first = time.Now()
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(429)
			fmt.Fprint(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		if time.Since(first) < 900*time.Millisecond {
			t.Errorf("retried after %v, before the 1 s Retry-After", time.Since(first))
		}
		streamHeaders(w)
		chunk(w, `{"content":"ok"}`, "")
		finish(w, "stop")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	text, _, _, err := collect(t, newOpenAI(srv.URL), basicReq)
	require.NoError(t, err)
	require.Equal(t, "ok", text)
	require.EqualValues(t, 2, calls.Load())
}

// The pause a 429 asks for, read from the header OpenAI sends: its
// retry-after-ms before Retry-After, and a Retry-After too large for a
// Duration as a long pause, not as none. Each asks for more than the
// 2 s a caller waits, so the call is made once.
func TestOpenAIReadsThePauseA429AsksFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    time.Duration
	}{
		{"retry-after-ms", map[string]string{"Retry-After-Ms": "20000", "Retry-After": "0"}, 20 * time.Second},
		{"fractional retry-after-ms", map[string]string{"Retry-After-Ms": "2500.5"}, 2500500 * time.Microsecond},
		{"retry-after past a Duration", map[string]string{"Retry-After": "1e30"}, 24 * time.Hour},
		{"retry-after Inf", map[string]string{"Retry-After": "+Inf"}, 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, calls := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
				for k, v := range tc.headers {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(429)
				fmt.Fprint(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
			})
			_, _, _, err := collect(t, newOpenAI(srv.URL), basicReq)
			var pe *llm.ProviderError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.want, pe.RetryAfter)
			require.EqualValues(t, 1, calls.Load(), "a pause longer than the caller waits is not waited for")
		})
	}
}

// An account whose credit is spent answers 429 insufficient_quota: not a
// rate limit, and no pause makes the next attempt succeed.
func TestOpenAIInsufficientQuotaIsNotRetried(t *testing.T) {
	t.Parallel()
	srv, calls := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		fmt.Fprint(w, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`)
	})
	_, _, _, err := collect(t, newOpenAI(srv.URL), basicReq)
	var pe *llm.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 429, pe.Status)
	require.False(t, pe.Retryable())
	require.EqualValues(t, 1, calls.Load(), "insufficient_quota is asked once")
}

func TestOpenAIServerErrorIsAProviderError(t *testing.T) {
	t.Parallel()
	srv, calls := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		fmt.Fprint(w, `{"error":{"message":"The server had an error","type":"server_error","code":null}}`)
	})
	_, _, _, err := collect(t, newOpenAI(srv.URL), basicReq)
	var pe *llm.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 500, pe.Status)
	require.Equal(t, "openai", pe.Provider)
	require.EqualValues(t, 3, calls.Load(), "a 500 is retried up to the attempts")
	require.NotContains(t, err.Error(), srv.URL, "an upstream error must not carry the URL")
}

func TestOpenAICutMidStreamIsNotRetried(t *testing.T) {
	t.Parallel()
	srv, calls := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
		streamHeaders(w)
		chunk(w, `{"content":"Half an "}`, "")
		chunk(w, `{"content":"answer"}`, "")
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // the connection drops mid-stream
		}
	})
	text, _, _, err := collect(t, newOpenAI(srv.URL), basicReq)
	require.Error(t, err)
	require.Equal(t, "Half an answer", text, "the text before the cut, once")
	require.EqualValues(t, 1, calls.Load(), "a stream that yielded text must not be retried")
}

// A stream that ends without a finish reason (closed cleanly, even with
// [DONE]) was cut: an error, never a whole answer; not retried after text.
func TestOpenAIStreamWithoutFinishReasonIsAnError(t *testing.T) {
	t.Parallel()
	for _, done := range []bool{false, true} {
		srv, calls := openAIServer(t, func(_ int, w http.ResponseWriter, _ map[string]any) {
			streamHeaders(w)
			chunk(w, `{"content":"Half an "}`, "")
			chunk(w, `{"content":"answer"}`, "")
			if done {
				fmt.Fprint(w, "data: [DONE]\n\n")
			}
		})
		text, _, _, err := collect(t, newOpenAI(srv.URL), basicReq)
		var pe *llm.ProviderError
		require.ErrorAs(t, err, &pe, "done=%v", done)
		require.Contains(t, pe.Error(), "finish reason")
		require.Equal(t, "Half an answer", text)
		require.EqualValues(t, 1, calls.Load())
	}
}

func TestLocalEngine(t *testing.T) {
	t.Parallel()
	m := llm.Local{}
	text, _, usage, err := collect(t, m, llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "What are your opening hours?"}}})
	require.NoError(t, err)
	require.Equal(t, llm.NoKnowledgeAnswer, text)
	require.NotNil(t, usage)
	require.Positive(t, usage.CompletionTokens)

	req := llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "When are the opening hours on Sunday?"}},
		Knowledge: []llm.Passage{
			{Source: "faq.md", Text: "Parking is free. Our opening hours are 9 to 5 on weekdays. On Sunday the opening hours are 10 to 2."},
			{Source: "pets.md", Text: "Dogs are welcome."},
		},
	}
	text, _, _, err = collect(t, m, req)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(text, "On Sunday the opening hours are 10 to 2."), "got %q", text)
	require.NotContains(t, text, "Dogs")
	again, _, _, _ := collect(t, m, req)
	require.Equal(t, text, again, "the local engine is deterministic")

	// No shared word: the passage closest by embedding answers, if close
	// enough; else the engine says it does not know.
	req = llm.Request{
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "Can I bring my dog?"}},
		Knowledge: []llm.Passage{
			{Source: "hours.md", Text: "We open at nine.", Similarity: 0.2},
			{Source: "pets.md", Text: "Animals are welcome. Keep them on a leash. Water bowls are at the door. Cats too.", Similarity: 0.46},
		},
	}
	text, _, _, err = collect(t, m, req)
	require.NoError(t, err)
	require.Equal(t, "Animals are welcome. Keep them on a leash. Water bowls are at the door.", text)
	req.Knowledge[1].Similarity = 0.25
	text, _, _, err = collect(t, m, req)
	require.NoError(t, err)
	require.Equal(t, llm.NoKnowledgeAnswer, text, "nothing close enough")
}
