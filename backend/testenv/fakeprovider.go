package testenv

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/llm/fakeopenai"
	"github.com/parleyhq/parley/backend/server"
)

// FakeReply scripts one answer of the fake provider.
type FakeReply struct {
	Tokens []string
	// Delay comes before each token.
	Delay time.Duration
	// Status, when set, answers with that HTTP error instead.
	Status int
	// Forever keeps sending the tokens again until the client goes away.
	Forever bool
	// CutAfter > 0 drops the connection after that many tokens.
	CutAfter int
	// StallAfter > 0 sends nothing more after that many tokens, until the
	// client goes away.
	StallAfter int
	// ToolCalls are sent after the tokens, as OpenAI streams them (a
	// tool_calls delta each, then finish_reason "tool_calls").
	ToolCalls []llm.ToolCall
	// NoUsage ends the stream without its usage chunk, as a server that
	// reports none does.
	NoUsage bool
	// Finish, when set, is the finish_reason sent (content_filter,
	// length); default: stop, or tool_calls after calls.
	Finish string
	// Usage, when set, is the usage reported; default: 11 prompt and 5
	// completion tokens.
	Usage *llm.Usage
}

// FakeProvider is an OpenAI-compatible server on loopback that speaks the
// chat.completions streaming wire format, records what it was asked and
// answers as scripted. It stands in for the model providers, which are not
// reachable from here.
type FakeProvider struct {
	URL string
	// Reply scripts each call (1-based); default: "Hello from the fake model."
	Reply func(call int, body map[string]any) FakeReply

	mu       sync.Mutex
	requests []map[string]any
	canceled int
}

// NewFakeProvider starts one for t.
func NewFakeProvider(t testing.TB) *FakeProvider {
	f := &FakeProvider{}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// Requests returns the bodies received so far.
func (f *FakeProvider) Requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any{}, f.requests...)
}

// Canceled is how many calls ended because the caller went away.
func (f *FakeProvider) Canceled() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.canceled
}

func (f *FakeProvider) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	f.mu.Lock()
	f.requests = append(f.requests, body)
	call := len(f.requests)
	f.mu.Unlock()
	reply := FakeReply{Tokens: []string{"Hello", " from", " the", " fake", " model."}}
	if f.Reply != nil {
		reply = f.Reply(call, body)
	}
	if reply.Status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(reply.Status)
		fmt.Fprint(w, `{"error":{"message":"scripted failure","type":"server_error","code":null}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	sent := 0
	for {
		for _, tok := range reply.Tokens {
			select {
			case <-r.Context().Done():
				f.mu.Lock()
				f.canceled++
				f.mu.Unlock()
				return
			case <-time.After(reply.Delay):
			}
			fakeopenai.Token(w, tok)
			w.(http.Flusher).Flush()
			sent++
			if reply.StallAfter > 0 && sent >= reply.StallAfter {
				<-r.Context().Done()
				f.mu.Lock()
				f.canceled++
				f.mu.Unlock()
				return
			}
			if reply.CutAfter > 0 && sent >= reply.CutAfter {
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close()
				}
				return
			}
		}
		if !reply.Forever {
			break
		}
	}
	for i, c := range reply.ToolCalls {
		call, _ := json.Marshal(map[string]any{"index": i, "id": c.ID, "type": "function",
			"function": map[string]string{"name": c.Name, "arguments": c.Arguments}})
		fakeopenai.Chunk(w, `{"tool_calls":[`+string(call)+`]}`)
	}
	finish := "stop"
	if len(reply.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	if reply.Finish != "" {
		finish = reply.Finish
	}
	if reply.NoUsage {
		fakeopenai.EndWithoutUsage(w, finish)
		return
	}
	usage := llm.Usage{PromptTokens: 11, CompletionTokens: 5}
	if reply.Usage != nil {
		usage = *reply.Usage
	}
	fakeopenai.End(w, finish, int(usage.PromptTokens), int(usage.CompletionTokens))
}

// WithFakeModels routes every spec model name to f (as provider "openai",
// upstream "fake-<name>").
func WithFakeModels(f *FakeProvider) Option {
	return func(c *server.Config) {
		m := llm.Retry(llm.NewOpenAI(llm.OpenAIConfig{Name: "openai", APIKey: "sk-fake", BaseURL: f.URL + "/v1"}), 2, 10*time.Millisecond, time.Second)
		var routes []llm.Route
		for _, name := range llm.SpecModels {
			routes = append(routes, llm.Route{Name: name, Upstream: "fake-" + name, Model: m, InputPerMTok: 1, OutputPerMTok: 2})
		}
		c.Catalog = llm.NewCatalog(routes...)
	}
}
