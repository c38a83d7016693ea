package chat_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// A tool round's call and result grow the prompt past what the history
// budget left: the next call asks for what the window still leaves, never
// prompt + MaxOutputTokens past it (OpenAI and vLLM refuse such a request,
// and the turn failed after its tools had run).
func TestToolRoundLeavesTheAnswerItsRoom(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	// The tool's definition (about 300 tokens) and the question leave the
	// first call all its room; the round's call and result do not.
	const window = llm.MaxOutputTokens + 450
	e := smallWindow(t, fake, window)
	r := e.Do("POST", "/api/agents", e.A.Key, `{"name":"n","instructions":"Collect leads.","tools":["lead_capture"]}`)
	var a struct{ ID string }
	r.JSON(t, &a)
	note := strings.Repeat("The visitor wants maps of the harbour and charts of the bay. ", 17)
	args := fmt.Sprintf(`{"email":"ada@example.com","note":%q}`, note[:990])
	fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 1 {
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "lead_capture", Arguments: args}}}
		}
		return testenv.FakeReply{Tokens: []string{"Noted."}}
	}
	r = e.Do("POST", "/api/v2/agent/"+a.ID+"/chat", e.A.Key, `{"query":"I am ada@example.com, I want maps","conversationId":"room"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	reqs := fake.Requests()
	require.Len(t, reqs, 2)
	var bounds []int
	for _, req := range reqs {
		// The prompt as sent: every message's text, the calls' arguments,
		// the tools' definitions.
		sent := 0
		for _, tl := range tools(req) {
			sent += llm.CountTokens(tl)
		}
		for _, m := range req["messages"].([]any) {
			m := m.(map[string]any)
			if c, ok := m["content"].(string); ok {
				sent += llm.CountTokens(c)
			}
			calls, _ := m["tool_calls"].([]any)
			for _, c := range calls {
				fn := c.(map[string]any)["function"].(map[string]any)
				sent += llm.CountTokens(fn["name"].(string)) + llm.CountTokens(fn["arguments"].(string))
			}
		}
		bound := int(req["max_completion_tokens"].(float64))
		t.Logf("prompt %d tokens, bound %d", sent, bound)
		require.LessOrEqual(t, sent+bound, window, "prompt %d tokens + answer %d fit the window", sent, bound)
		bounds = append(bounds, bound)
	}
	require.Equal(t, llm.MaxOutputTokens, bounds[0], "the first call has all the room")
	require.Less(t, bounds[1], llm.MaxOutputTokens, "after the round, what the window leaves")
}

// tools are the texts of the tools an OpenAI request offers: each one's
// name, description and parameters' schema as JSON.
func tools(req map[string]any) []string {
	var out []string
	list, _ := req["tools"].([]any)
	for _, tl := range list {
		fn := tl.(map[string]any)["function"].(map[string]any)
		schema, _ := json.Marshal(fn["parameters"])
		desc, _ := fn["description"].(string)
		out = append(out, fn["name"].(string), desc, string(schema))
	}
	return out
}

// Results of a round that do not fit in what the window leaves (each
// http_request result may be 16 KiB, some 4,000 tokens; a round may hold 8
// calls) are cut to fit: sent whole, the prompt passed the window, the
// provider refused it and the turn failed after its tools had run.
func TestToolResultsAreCutToTheWindow(t *testing.T) {
	t.Parallel()
	var words []string
	for i := range 4000 {
		words = append(words, fmt.Sprintf("w%d", i))
	}
	big := strings.Join(words, " ")[:16<<10]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(big))
	}))
	t.Cleanup(srv.Close)
	fake := testenv.NewFakeProvider(t)
	const window = llm.MaxOutputTokens + 3000
	e := smallWindow(t, fake, window, func(c *server.Config) {
		c.FetchAllow = append(c.FetchAllow, netip.MustParsePrefix("127.0.0.0/8"))
	})
	r := e.Do("POST", "/api/agents", e.A.Key, map[string]any{
		"name": "n", "instructions": "Look things up.", "tools": []string{"http_request"},
		"toolSettings": map[string]any{"http_request": map[string]any{"endpoints": []any{map[string]any{"name": "big", "url": srv.URL}}}},
	})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	var a struct{ ID string }
	r.JSON(t, &a)
	fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 1 {
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{
				{ID: "c1", Name: "http_request", Arguments: `{"endpoint":"big"}`},
				{ID: "c2", Name: "http_request", Arguments: `{"endpoint":"big"}`},
				{ID: "c3", Name: "http_request", Arguments: `{"endpoint":"big"}`},
			}}
		}
		return testenv.FakeReply{Tokens: []string{"Done."}}
	}
	r = e.Do("POST", "/api/v2/agent/"+a.ID+"/chat", e.A.Key, `{"query":"look it up","conversationId":"cut-results"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	reqs := fake.Requests()
	require.Len(t, reqs, 2)
	sent := openAIPromptTokens(reqs[1])
	var results []string
	for _, m := range reqs[1]["messages"].([]any) {
		if m := m.(map[string]any); m["role"] == "tool" {
			results = append(results, m["content"].(string))
		}
	}
	bound := int(reqs[1]["max_completion_tokens"].(float64))
	require.LessOrEqual(t, sent+bound, window, "prompt %d tokens + answer %d fit the window", sent, bound)
	require.Len(t, results, 3, "every call has its result")
	require.Contains(t, results[0], "HTTP 200 OK", "the first result is given, cut if need be")
	require.Contains(t, strings.Join(results, ""), "the rest does not fit in what the context window leaves", "the model is told")
	for _, c := range results {
		require.True(t, strings.HasSuffix(c, "</tool_output>"), "a cut result keeps its delimiter: %q", c[max(0, len(c)-80):])
	}
}

// smallWindow is a server whose one model (gpt-4o-mini, over OpenAI's wire
// to fake) has a window of window tokens, as a models file's contextTokens
// gives a small self-hosted model.
func smallWindow(t *testing.T, fake *testenv.FakeProvider, window int, more ...func(*server.Config)) *testenv.Env {
	return testenv.New(t, func(c *server.Config) {
		m := llm.NewOpenAI(llm.OpenAIConfig{Name: "openai", APIKey: "k", BaseURL: fake.URL + "/v1"})
		c.Catalog = llm.NewCatalog(llm.Route{Name: "gpt-4o-mini", Upstream: "small", Model: m, ContextTokens: window})
		for _, f := range more {
			f(c)
		}
	})
}

// openAIPromptTokens is the prompt of req, a request on OpenAI's wire, as
// OpenAI counts it: 3 tokens priming the reply, 3 for each message beside
// its text and tool calls, and the tools' definitions.
func openAIPromptTokens(req map[string]any) int {
	n := 3
	for _, tl := range tools(req) {
		n += llm.CountTokens(tl)
	}
	for _, m := range req["messages"].([]any) {
		m := m.(map[string]any)
		n += 3
		if c, ok := m["content"].(string); ok {
			n += llm.CountTokens(c)
		}
		calls, _ := m["tool_calls"].([]any)
		for _, c := range calls {
			fn := c.(map[string]any)["function"].(map[string]any)
			n += llm.CountTokens(fn["name"].(string)) + llm.CountTokens(fn["arguments"].(string))
		}
	}
	return n
}
