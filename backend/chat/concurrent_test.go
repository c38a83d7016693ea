package chat_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// strictProvider is a fake of Anthropic's or Gemini's streaming API that,
// as the real one did, refuses a conversation that does not begin with the
// user or in which the user and the assistant do not speak in turn. It
// records the roles and texts of each request.
type strictProvider struct {
	URL string

	mu    sync.Mutex
	turns [][]string // per request: "role: text"
}

func newStrictProvider(t *testing.T, anthropic bool) *strictProvider {
	p := &strictProvider{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct {
				Role    string
				Content []struct{ Text string }
			}
			Contents []struct {
				Role  string
				Parts []struct{ Text string }
			}
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var roles, turns []string
		for _, m := range req.Messages {
			text := ""
			for _, c := range m.Content {
				text += c.Text
			}
			roles, turns = append(roles, m.Role), append(turns, m.Role+": "+text)
		}
		for _, c := range req.Contents {
			text := ""
			for _, part := range c.Parts {
				text += part.Text
			}
			roles, turns = append(roles, c.Role), append(turns, c.Role+": "+text)
		}
		p.mu.Lock()
		p.turns = append(p.turns, turns)
		p.mu.Unlock()
		refusal := ""
		for i, role := range roles {
			switch {
			case i == 0 && role != "user":
				refusal = `first message must use the "user" role`
			case i > 0 && role == roles[i-1]:
				refusal = "roles must alternate between the user and the assistant"
			}
			if refusal != "" {
				break
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if refusal != "" {
			w.WriteHeader(400)
			if anthropic {
				fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, "messages: "+refusal)
			} else {
				fmt.Fprintf(w, `{"error":{"code":400,"message":%q,"status":"INVALID_ARGUMENT"}}`, refusal)
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		sse := func(event, data string) {
			if event != "" {
				fmt.Fprintf(w, "event: %s\n", event)
			}
			fmt.Fprintf(w, "data: %s\n\n", data)
		}
		if anthropic {
			sse("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":9,"output_tokens":1}}}`)
			sse("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Noted."}}`)
			sse("content_block_stop", `{"type":"content_block_stop","index":0}`)
			sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`)
			sse("message_stop", `{"type":"message_stop"}`)
			return
		}
		sse("", `{"candidates":[{"content":{"parts":[{"text":"Noted."}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":2}}`)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// last is the roles and texts of the last request.
func (p *strictProvider) last(t *testing.T) []string {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.NotEmpty(t, p.turns)
	return p.turns[len(p.turns)-1]
}

// Two turns of one conversation at once (a double submit, a second tab, a
// retry while the first still streams) store both questions before either
// answer, and the answers as they finish. The turns are not serialized:
// both are answered, and the conversation goes on, on every provider:
// Anthropic and Gemini get its history with the user and the assistant in
// turn (they refused it as stored, and with it every later turn).
func TestConcurrentTurnsInOneConversation(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	anthropic, gemini := newStrictProvider(t, true), newStrictProvider(t, false)
	release := make(chan struct{})
	fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 1 {
			<-release // turn A streams until turn B is over
			return testenv.FakeReply{Tokens: []string{"Answer A."}}
		}
		return testenv.FakeReply{Tokens: []string{"Answer B."}}
	}
	e := testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) {
		openai := llm.NewOpenAI(llm.OpenAIConfig{Name: "openai", APIKey: "sk-fake", BaseURL: fake.URL + "/v1"})
		g, err := llm.NewGemini(llm.GeminiConfig{APIKey: "gm-test", BaseURL: gemini.URL})
		require.NoError(t, err)
		c.Catalog = llm.NewCatalog(
			llm.Route{Name: "gpt-4o-mini", Upstream: "fake-gpt-4o-mini", Model: openai},
			llm.Route{Name: "claude-3-5-sonnet", Upstream: "claude-3-5-sonnet-latest", Model: llm.NewAnthropic(llm.AnthropicConfig{APIKey: "sk-ant-test", BaseURL: anthropic.URL})},
			llm.Route{Name: "gemini-1-5-pro", Upstream: "gemini-1.5-pro", Model: g},
		)
	})
	f := &fixture{Env: e, fake: fake}
	agent := f.agent(t, `{"name":"Shop","instructions":"You sell things.","model":"gpt-4o-mini"}`)
	turn := func(body string) reply {
		status, rep, raw := f.chat(t, agent, f.A.Key, body)
		require.Equal(t, 200, status, "%s", raw.Body)
		return rep
	}

	var wg sync.WaitGroup
	var first reply
	wg.Add(1)
	go func() {
		defer wg.Done()
		first = turn(`{"query":"Question A","conversationId":"both"}`)
	}()
	require.Eventually(t, func() bool { return len(fake.Requests()) == 1 }, 10*time.Second, 5*time.Millisecond)
	second := turn(`{"query":"Question B","conversationId":"both"}`)
	close(release)
	wg.Wait()
	require.Equal(t, "Answer A.", first.Answer)
	require.Equal(t, "Answer B.", second.Answer)
	require.Equal(t, "both", first.ConversationID)
	require.Equal(t, "both", second.ConversationID)

	// Turn B saw A's question, not yet answered (OpenAI takes that as it is).
	var roles []string
	for _, m := range promptOf(t, fake, 1) {
		roles = append(roles, fmt.Sprint(m["role"], ": ", m["content"]))
	}
	require.Equal(t, []string{"system: You sell things.", "user: Question A", "user: Question B"}, roles)

	// Stored as they came: both questions, then B's answer, then A's.
	r := f.Do("GET", "/api/v2/conversations/both", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var tr struct{ Messages []struct{ Role, Text string } }
	r.JSON(t, &tr)
	var stored []string
	for _, m := range tr.Messages {
		stored = append(stored, m.Role+": "+m.Text)
	}
	require.Equal(t, []string{"user: Question A", "user: Question B", "assistant: Answer B.", "assistant: Answer A."}, stored)

	// The next turns, on Anthropic and on Gemini: answered, each question
	// and answer of the pair kept, in turn.
	rep := turn(`{"query":"Question C","conversationId":"both","selectedModel":"claude-3-5-sonnet"}`)
	require.Equal(t, "Noted.", rep.Answer)
	require.Equal(t, []string{
		"user: Question A\n\nQuestion B", "assistant: Answer B.\n\nAnswer A.", "user: Question C",
	}, anthropic.last(t))
	rep = turn(`{"query":"Question D","conversationId":"both","selectedModel":"gemini-1-5-pro"}`)
	require.Equal(t, "Noted.", rep.Answer)
	require.Equal(t, []string{
		"user: Question A\n\nQuestion B", "model: Answer B.\n\nAnswer A.", "user: Question C", "model: Noted.", "user: Question D",
	}, gemini.last(t))
}
