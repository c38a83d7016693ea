package llm_test

import (
	"encoding/base64"
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

// wire writes one provider's real streaming wire format.
type wire struct {
	name     string
	path     string // the request path the SDK must call
	newModel func(baseURL string) llm.Model
	text     func(w http.ResponseWriter, pieces []string, prompt, completion int)
	tool     func(w http.ResponseWriter, id, name string, argPieces []string)
	tooMany  func(w http.ResponseWriter, retryAfterSeconds int)
	broken   func(w http.ResponseWriter)
	// cut writes pieces and leaves the stream unfinished.
	cut func(w http.ResponseWriter, pieces []string)
	// images reads the images of a request body's last message, as the
	// provider's API defines them: type and base64 bytes.
	images func(t *testing.T, body []byte) []wireImage
}

type wireImage struct{ MIMEType, Data string }

func sse(w http.ResponseWriter, event, data string) {
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", data)
	w.(http.Flusher).Flush()
}

func jsonStr(s string) string { return fmt.Sprintf("%q", s) }

var anthropicWire = wire{
	name:   "anthropic",
	path:   "/v1/messages",
	images: anthropicImages,
	newModel: func(u string) llm.Model {
		return llm.Retry(llm.NewAnthropic(llm.AnthropicConfig{APIKey: "sk-ant-test", BaseURL: u}), 3, 10*time.Millisecond, 2*time.Second)
	},
	text: func(w http.ResponseWriter, pieces []string, prompt, completion int) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-3-5-sonnet-latest","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`, prompt))
		sse(w, "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		sse(w, "ping", `{"type":"ping"}`)
		for _, p := range pieces {
			sse(w, "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+jsonStr(p)+`}}`)
		}
		sse(w, "content_block_stop", `{"type":"content_block_stop","index":0}`)
		sse(w, "message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, completion))
		sse(w, "message_stop", `{"type":"message_stop"}`)
	},
	tool: func(w http.ResponseWriter, id, name string, args []string) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,"output_tokens":1}}}`)
		sse(w, "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":`+jsonStr(id)+`,"name":`+jsonStr(name)+`,"input":{}}}`)
		for _, a := range args {
			sse(w, "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+jsonStr(a)+`}}`)
		}
		sse(w, "content_block_stop", `{"type":"content_block_stop","index":0}`)
		sse(w, "message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":12}}`)
		sse(w, "message_stop", `{"type":"message_stop"}`)
	},
	tooMany: func(w http.ResponseWriter, secs int) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		w.WriteHeader(429)
		fmt.Fprint(w, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}`)
	},
	broken: func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		fmt.Fprint(w, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`)
	},
	cut: func(w http.ResponseWriter, pieces []string) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,"output_tokens":1}}}`)
		sse(w, "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		for _, p := range pieces {
			sse(w, "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`+jsonStr(p)+`}}`)
		}
	},
}

// anthropicImages: image blocks with a base64 source.
func anthropicImages(t *testing.T, body []byte) []wireImage {
	var req struct {
		Messages []struct {
			Content []struct {
				Type   string
				Source struct {
					Type      string `json:"type"`
					MediaType string `json:"media_type"`
					Data      string `json:"data"`
				} `json:"source"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(body, &req))
	var out []wireImage
	for _, b := range req.Messages[len(req.Messages)-1].Content {
		if b.Type == "image" {
			require.Equal(t, "base64", b.Source.Type)
			out = append(out, wireImage{b.Source.MediaType, b.Source.Data})
		}
	}
	return out
}

// geminiImages: inline data parts.
func geminiImages(t *testing.T, body []byte) []wireImage {
	var req struct {
		Contents []struct {
			Parts []struct {
				InlineData *struct{ MIMEType, Data string } `json:"inlineData"`
				FileData   any                              `json:"fileData"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(body, &req))
	var out []wireImage
	for _, p := range req.Contents[len(req.Contents)-1].Parts {
		require.Nil(t, p.FileData, "no URL for the provider to fetch")
		if p.InlineData != nil {
			out = append(out, wireImage{p.InlineData.MIMEType, p.InlineData.Data})
		}
	}
	return out
}

var geminiWire = wire{
	name:   "gemini",
	path:   "/v1beta/models/gemini-1.5-pro:streamGenerateContent",
	images: geminiImages,
	newModel: func(u string) llm.Model {
		g, err := llm.NewGemini(llm.GeminiConfig{APIKey: "gm-test", BaseURL: u})
		if err != nil {
			panic(err)
		}
		return llm.Retry(g, 3, 10*time.Millisecond, 2*time.Second)
	},
	text: func(w http.ResponseWriter, pieces []string, prompt, completion int) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, p := range pieces {
			finish := ""
			usage := ""
			if i == len(pieces)-1 {
				finish = `,"finishReason":"STOP"`
				usage = fmt.Sprintf(`,"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d}`, prompt, completion, prompt+completion)
			}
			sse(w, "", `{"candidates":[{"content":{"parts":[{"text":`+jsonStr(p)+`}],"role":"model"},"index":0`+finish+`}]`+usage+`,"modelVersion":"gemini-1.5-pro"}`)
		}
	},
	tool: func(w http.ResponseWriter, id, name string, args []string) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "", `{"candidates":[{"content":{"parts":[{"functionCall":{"id":`+jsonStr(id)+`,"name":`+jsonStr(name)+`,"args":`+strings.Join(args, "")+`}}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5}}`)
	},
	tooMany: func(w http.ResponseWriter, secs int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		fmt.Fprintf(w, `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"%ds"}]}}`, secs)
	},
	broken: func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		fmt.Fprint(w, `{"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}`)
	},
	cut: func(w http.ResponseWriter, pieces []string) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, p := range pieces {
			sse(w, "", `{"candidates":[{"content":{"parts":[{"text":`+jsonStr(p)+`}],"role":"model"},"index":0}]}`)
		}
	},
}

func hijackClose(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

func wireServer(t *testing.T, wr wire, handle func(call int, w http.ResponseWriter)) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != wr.path {
			t.Errorf("%s: request to %s, want %s", wr.name, r.URL.Path, wr.path)
			http.NotFound(w, r)
			return
		}
		handle(int(calls.Add(1)), w)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestProviderWireFormats(t *testing.T) {
	t.Parallel()
	req := llm.Request{Model: "gemini-1.5-pro", System: "Be brief.", Temperature: 0.2,
		Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}, {Role: llm.RoleAssistant, Content: "hello"}, {Role: llm.RoleUser, Content: "and?"}}}
	for _, wr := range []wire{anthropicWire, geminiWire} {
		t.Run(wr.name+"/text and usage", func(t *testing.T) {
			t.Parallel()
			srv, _ := wireServer(t, wr, func(_ int, w http.ResponseWriter) { wr.text(w, []string{"Hel", "lo ", "there."}, 21, 4) })
			text, calls, usage, err := collect(t, wr.newModel(srv.URL), req)
			require.NoError(t, err)
			require.Equal(t, "Hello there.", text)
			require.Empty(t, calls)
			require.Equal(t, &llm.Usage{PromptTokens: 21, CompletionTokens: 4}, usage)
		})
		t.Run(wr.name+"/tool call", func(t *testing.T) {
			t.Parallel()
			srv, _ := wireServer(t, wr, func(_ int, w http.ResponseWriter) {
				wr.tool(w, "call_9", "web_search", []string{`{"query":`, `"parley"}`})
			})
			r := req
			r.Tools = []llm.Tool{{Name: "web_search", Description: "Search the web", Parameters: map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}}}
			_, calls, _, err := collect(t, wr.newModel(srv.URL), r)
			require.NoError(t, err)
			require.Len(t, calls, 1)
			require.Equal(t, "web_search", calls[0].Name)
			require.Equal(t, "call_9", calls[0].ID)
			require.JSONEq(t, `{"query":"parley"}`, calls[0].Arguments)
		})
		t.Run(wr.name+"/images as bytes", func(t *testing.T) {
			t.Parallel()
			var body []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ = io.ReadAll(r.Body)
				wr.text(w, []string{"A cat."}, 1, 1)
			}))
			t.Cleanup(srv.Close)
			png, webp := []byte("\x89PNG\r\n\x1a\n\x00\x01"), []byte("RIFF\x00\x00\x00\x00WEBPVP8 ")
			r := req
			r.Messages = []llm.Message{{Role: llm.RoleUser, Content: "what is this?", Images: []llm.Image{
				{MIMEType: "image/png", Data: png}, {MIMEType: "image/webp", Data: webp},
			}}}
			text, _, _, err := collect(t, wr.newModel(srv.URL), r)
			require.NoError(t, err)
			require.Equal(t, "A cat.", text)
			require.Equal(t, []wireImage{
				{"image/png", base64.StdEncoding.EncodeToString(png)},
				{"image/webp", base64.StdEncoding.EncodeToString(webp)},
			}, wr.images(t, body))
		})
		t.Run(wr.name+"/429 with retry-after", func(t *testing.T) {
			t.Parallel()
			var first time.Time
			srv, calls := wireServer(t, wr, func(call int, w http.ResponseWriter) {
				if call == 1 {
					first = time.Now()
					wr.tooMany(w, 1)
					return
				}
				if d := time.Since(first); d < 900*time.Millisecond {
					t.Errorf("retried after %v, before the 1 s asked", d)
				}
				wr.text(w, []string{"ok"}, 1, 1)
			})
			text, _, _, err := collect(t, wr.newModel(srv.URL), req)
			require.NoError(t, err)
			require.Equal(t, "ok", text)
			require.EqualValues(t, 2, calls.Load())
		})
		t.Run(wr.name+"/500", func(t *testing.T) {
			t.Parallel()
			srv, calls := wireServer(t, wr, func(_ int, w http.ResponseWriter) { wr.broken(w) })
			_, _, _, err := collect(t, wr.newModel(srv.URL), req)
			var pe *llm.ProviderError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, 500, pe.Status)
			require.Equal(t, wr.name, pe.Provider)
			require.EqualValues(t, 3, calls.Load(), "retried up to the attempts")
		})
		t.Run(wr.name+"/cut mid-stream", func(t *testing.T) {
			t.Parallel()
			srv, calls := wireServer(t, wr, func(_ int, w http.ResponseWriter) {
				wr.cut(w, []string{"Half ", "an answer"})
				hijackClose(w)
			})
			text, _, _, err := collect(t, wr.newModel(srv.URL), req)
			require.Error(t, err)
			require.Equal(t, "Half an answer", text)
			require.EqualValues(t, 1, calls.Load(), "never retried once text went out")
		})
	}
}

// Every provider is asked to bound its reply at llm.MaxOutputTokens, each
// in its own field: without a bound OpenAI and Gemini let a runaway answer
// run to the model's own limit (16k to 64k tokens), every one billed.
func TestEveryProviderBoundsTheReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		newModel func(baseURL string) llm.Model
		bound    func(body map[string]any) any
	}{
		{"openai", func(u string) llm.Model { return newOpenAI(u) }, func(b map[string]any) any { return b["max_completion_tokens"] }},
		{"anthropic", anthropicWire.newModel, func(b map[string]any) any { return b["max_tokens"] }},
		{"gemini", geminiWire.newModel, func(b map[string]any) any {
			c, _ := b["generationConfig"].(map[string]any)
			return c["maxOutputTokens"]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var body map[string]any
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				require.NoError(t, json.Unmarshal(b, &body))
				switch tc.name {
				case "openai":
					streamHeaders(w)
					chunk(w, `{"content":"ok"}`, "")
					finish(w, "stop")
					fmt.Fprint(w, "data: [DONE]\n\n")
				case "anthropic":
					anthropicWire.text(w, []string{"ok"}, 1, 1)
				case "gemini":
					geminiWire.text(w, []string{"ok"}, 1, 1)
				}
			}))
			t.Cleanup(srv.Close)
			text, _, _, err := collect(t, tc.newModel(srv.URL), llm.Request{Model: "gemini-1.5-pro", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
			require.NoError(t, err)
			require.Equal(t, "ok", text)
			require.EqualValues(t, llm.MaxOutputTokens, tc.bound(body), "the reply's bound in %v", body)
			// A request's own bound (a call after tool rounds, on a small
			// window: Route.AnswerRoom) is the one sent.
			_, _, _, err = collect(t, tc.newModel(srv.URL), llm.Request{Model: "gemini-1.5-pro", MaxTokens: 700, Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
			require.NoError(t, err)
			require.EqualValues(t, 700, tc.bound(body), "the request's bound in %v", body)
		})
	}
}

// A Gemini model that thinks reports its thoughts apart from the answer
// (thoughtsTokenCount beside candidatesTokenCount) and bills them as
// output; a turn that left them out undercounted what the provider
// charged, often by most of it.
func TestGeminiThoughtsAreOutputTokens(t *testing.T) {
	t.Parallel()
	srv, _ := wireServer(t, geminiWire, func(_ int, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "", `{"candidates":[{"content":{"parts":[{"text":"Considering the question.","thought":true}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":21,"totalTokenCount":21},"modelVersion":"gemini-2.5-flash"}`)
		sse(w, "", `{"candidates":[{"content":{"parts":[{"text":"Hello."}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":21,"candidatesTokenCount":4,"thoughtsTokenCount":90,"totalTokenCount":115},"modelVersion":"gemini-2.5-flash"}`)
	})
	text, _, usage, err := collect(t, geminiWire.newModel(srv.URL), llm.Request{Model: "gemini-1.5-pro", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
	require.NoError(t, err)
	require.Equal(t, "Hello.", text, "thoughts are not the answer")
	require.Equal(t, &llm.Usage{PromptTokens: 21, CompletionTokens: 94}, usage)
}

// A reply that ends with nothing in it, for a provider's content filter, a
// refusal or its bound spent on thoughts, is no answer: an error naming the
// reason, asked once (the same request ends the same way), where it used to
// be an empty answer, stored and shown as one. An empty reply that ended
// normally is still an (empty) answer. Either way the usage the provider
// reported comes first: it billed the call (a thinking model's 4,096 tokens
// of thoughts), which was counted as nothing.
func TestReplyEndedEmptyIsNoAnswer(t *testing.T) {
	t.Parallel()
	openAIEnd := func(reason string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			streamHeaders(w)
			chunk(w, `{"role":"assistant","content":""}`, "")
			finish(w, reason)
			fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4096,"total_tokens":4106}}`+"\n\n")
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
	}
	anthropicEnd := func(reason string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, "message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,"output_tokens":1}}}`)
			sse(w, "message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+reason+`","stop_sequence":null},"usage":{"output_tokens":3}}`)
			sse(w, "message_stop", `{"type":"message_stop"}`)
		}
	}
	geminiEnd := func(reason string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, "", `{"candidates":[{"content":{"parts":[{"text":"Weighing it.","thought":true}],"role":"model"},"finishReason":"`+reason+`","index":0}],"usageMetadata":{"promptTokenCount":10,"thoughtsTokenCount":4096}}`)
		}
	}
	for _, tc := range []struct {
		name, reason string
		newModel     func(string) llm.Model
		write        func(w http.ResponseWriter)
		answer       bool
	}{
		{"openai", "content_filter", func(u string) llm.Model { return newOpenAI(u) }, openAIEnd("content_filter"), false},
		{"openai", "length", func(u string) llm.Model { return newOpenAI(u) }, openAIEnd("length"), false},
		{"openai", "stop", func(u string) llm.Model { return newOpenAI(u) }, openAIEnd("stop"), true},
		{"anthropic", "refusal", anthropicWire.newModel, anthropicEnd("refusal"), false},
		{"anthropic", "end_turn", anthropicWire.newModel, anthropicEnd("end_turn"), true},
		{"gemini", "SAFETY", geminiWire.newModel, geminiEnd("SAFETY"), false},
		{"gemini", "MAX_TOKENS", geminiWire.newModel, geminiEnd("MAX_TOKENS"), false},
		{"gemini", "STOP", geminiWire.newModel, geminiEnd("STOP"), true},
	} {
		t.Run(tc.name+"/"+tc.reason, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				calls.Add(1)
				tc.write(w)
			}))
			t.Cleanup(srv.Close)
			text, _, usage, err := collect(t, tc.newModel(srv.URL), llm.Request{Model: "gemini-1.5-pro", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
			require.Empty(t, text)
			// Answer or not, the call was billed: its usage is reported.
			require.NotNil(t, usage, "the usage the provider reported")
			require.Positive(t, usage.PromptTokens)
			require.Positive(t, usage.CompletionTokens)
			if tc.answer {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, llm.ErrNoAnswer)
			require.ErrorContains(t, err, tc.reason)
			var pe *llm.ProviderError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.name, pe.Provider)
			require.EqualValues(t, 1, calls.Load(), "asked once")
		})
	}
}

// A reply stopped after its text began, at its bound (OpenAI's length,
// Anthropic's max_tokens, Gemini's MAX_TOKENS) or by the provider's
// filters, is told as cut: it was taken for a whole answer, and the chat
// stored an answer cut mid-sentence as complete. A reply that ended
// normally is not.
func TestReplyStoppedMidAnswerIsCut(t *testing.T) {
	t.Parallel()
	openAIEnd := func(reason string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			streamHeaders(w)
			chunk(w, `{"role":"assistant","content":"The plan costs"}`, "")
			finish(w, reason)
			fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}}`+"\n\n")
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
	}
	anthropicEnd := func(reason string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, "message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,"output_tokens":1}}}`)
			sse(w, "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			sse(w, "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"The plan costs"}}`)
			sse(w, "content_block_stop", `{"type":"content_block_stop","index":0}`)
			sse(w, "message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+reason+`","stop_sequence":null},"usage":{"output_tokens":3}}`)
			sse(w, "message_stop", `{"type":"message_stop"}`)
		}
	}
	geminiEnd := func(reason string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, "", `{"candidates":[{"content":{"parts":[{"text":"The plan costs"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":3}}`)
			sse(w, "", `{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"`+reason+`","index":0}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":3}}`)
		}
	}
	for _, tc := range []struct {
		name, reason string
		newModel     func(string) llm.Model
		write        func(w http.ResponseWriter)
		cut          bool
	}{
		{"openai", "length", func(u string) llm.Model { return newOpenAI(u) }, openAIEnd("length"), true},
		{"openai", "content_filter", func(u string) llm.Model { return newOpenAI(u) }, openAIEnd("content_filter"), true},
		{"openai", "stop", func(u string) llm.Model { return newOpenAI(u) }, openAIEnd("stop"), false},
		{"anthropic", "max_tokens", anthropicWire.newModel, anthropicEnd("max_tokens"), true},
		{"anthropic", "refusal", anthropicWire.newModel, anthropicEnd("refusal"), true},
		{"anthropic", "end_turn", anthropicWire.newModel, anthropicEnd("end_turn"), false},
		{"anthropic", "stop_sequence", anthropicWire.newModel, anthropicEnd("stop_sequence"), false},
		{"gemini", "MAX_TOKENS", geminiWire.newModel, geminiEnd("MAX_TOKENS"), true},
		{"gemini", "SAFETY", geminiWire.newModel, geminiEnd("SAFETY"), true},
		{"gemini", "STOP", geminiWire.newModel, geminiEnd("STOP"), false},
	} {
		t.Run(tc.name+"/"+tc.reason, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { tc.write(w) }))
			t.Cleanup(srv.Close)
			var text, cut string
			var usage *llm.Usage
			err := tc.newModel(srv.URL).Stream(t.Context(), llm.Request{Model: "gemini-1.5-pro", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}, func(ev llm.Event) error {
				text += ev.Text
				if ev.Cut != "" {
					require.Empty(t, cut, "told once")
					require.Nil(t, usage, "before the usage")
					cut = ev.Cut
				}
				if ev.Usage != nil {
					usage = ev.Usage
				}
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, "The plan costs", text)
			require.NotNil(t, usage)
			if tc.cut {
				require.Equal(t, tc.reason, cut)
			} else {
				require.Empty(t, cut)
			}
		})
	}
}
