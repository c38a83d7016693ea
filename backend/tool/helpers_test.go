package tool_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// fakeSearXNG is a SearXNG instance on loopback speaking its JSON API
// (GET /search?q=...&format=json), answering every query with results.
type fakeSearXNG struct {
	URL     string
	Results []map[string]any
	// Status, when set, answers every search with that status.
	Status int

	mu      sync.Mutex
	queries []url.Values
}

func newFakeSearXNG(t *testing.T, results ...map[string]any) *fakeSearXNG {
	f := &fakeSearXNG{Results: results}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.Query())
		f.mu.Unlock()
		if r.URL.Path != "/search" || r.URL.Query().Get("format") != "json" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if f.Status != 0 {
			http.Error(w, "scripted failure", f.Status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"query": r.URL.Query().Get("q"), "number_of_results": len(f.Results), "results": f.Results,
			"answers": []any{}, "suggestions": []any{}, "unresponsive_engines": []any{},
		})
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *fakeSearXNG) Queries() []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]url.Values{}, f.queries...)
}

// page is a SearXNG result.
func page(i int, snippet string) map[string]any {
	return map[string]any{
		"url": fmt.Sprintf("https://example.org/page-%d", i), "title": fmt.Sprintf("Page %d", i),
		"content": snippet, "engine": "duckduckgo", "engines": []string{"duckduckgo"}, "score": 1.0 / float64(i),
		"category": "general", "positions": []int{i},
	}
}

// withSearXNG configures f as the deployment's web search backend.
func withSearXNG(f *fakeSearXNG) testenv.Option {
	return func(c *server.Config) { c.WebSearch.SearxngURL = f.URL }
}

// req is what the fake model was asked: its messages and offered tools.
type req map[string]any

func (r req) messages() []map[string]any {
	var out []map[string]any
	for _, m := range r["messages"].([]any) {
		out = append(out, m.(map[string]any))
	}
	return out
}

func (r req) last() map[string]any { m := r.messages(); return m[len(m)-1] }

// offered is the names of the tools the request offers.
func (r req) offered() []string {
	var out []string
	tools, _ := r["tools"].([]any)
	for _, t := range tools {
		out = append(out, t.(map[string]any)["function"].(map[string]any)["name"].(string))
	}
	return out
}

// function is the offered tool's definition.
func (r req) function(t *testing.T, name string) map[string]any {
	t.Helper()
	tools, _ := r["tools"].([]any)
	for _, tl := range tools {
		if fn := tl.(map[string]any)["function"].(map[string]any); fn["name"] == name {
			return fn
		}
	}
	t.Fatalf("tool %s not offered: %v", name, r.offered())
	return nil
}

// toolResult is the content of the result of call id, "" when none.
func (r req) toolResult(id string) string {
	for _, m := range r.messages() {
		if m["role"] == "tool" && m["tool_call_id"] == id {
			s, _ := m["content"].(string)
			return s
		}
	}
	return ""
}

// streamEvents reads a v2 chat stream's JSON events (the [DONE] left out).
func streamEvents(t *testing.T, e *testenv.Env, agent, key, body string) []map[string]any {
	t.Helper()
	resp := e.Post("/api/v2/agent/"+agent+"/chat", map[string]string{"Authorization": "Bearer " + key}, body)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var out []map[string]any
	for _, ev := range testenv.ReadSSE(t, resp.Body) {
		if ev.Data == "[DONE]" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &m), ev.Data)
		out = append(out, m)
	}
	return out
}

func ofType(events []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, ev := range events {
		if ev["type"] == typ {
			out = append(out, ev)
		}
	}
	return out
}

// createAgent creates an agent over REST and returns its reply.
func createAgent(t *testing.T, e *testenv.Env, key string, body map[string]any) map[string]any {
	t.Helper()
	if body["instructions"] == nil {
		body["instructions"] = "Be helpful."
	}
	if body["name"] == nil {
		body["name"] = "Agent"
	}
	r := e.Do("POST", "/api/agents", key, body)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	var out map[string]any
	r.JSON(t, &out)
	return out
}
