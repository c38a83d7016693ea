package chat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tmaxmax/go-sse"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// paced is an in-process model the test paces: it sends "first", waits
// for next, sends burst tokens as fast as it can, waits for end, and stops.
type paced struct {
	burst     []string
	mu        sync.Mutex
	next, end chan struct{}
}

func (*paced) Provider() string { return "paced" }

// pace gives the next call its channels.
func (m *paced) pace() (next, end chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next, m.end = make(chan struct{}), make(chan struct{})
	return m.next, m.end
}

func (m *paced) Stream(ctx context.Context, _ llm.Request, yield func(llm.Event) error) error {
	m.mu.Lock()
	next, end := m.next, m.end
	m.mu.Unlock()
	wait := func(ch chan struct{}) error {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := yield(llm.Event{Text: "first"}); err != nil {
		return err
	}
	if err := wait(next); err != nil {
		return err
	}
	for _, tok := range m.burst {
		if err := yield(llm.Event{Text: tok}); err != nil {
			return err
		}
	}
	return wait(end)
}

// Token events are coalesced into fewer flushes, read here with an SSE
// parser on both stream dialects: the first token reaches the client while
// the model still holds back its second (it is flushed at once), a burst of
// tokens arrives whole and in order while the model pauses after it (the
// last one is not held back until the next event), and the stream ends as
// before.
func TestTokenFlushes(t *testing.T) {
	t.Parallel()
	model := &paced{}
	for i := range 300 {
		model.burst = append(model.burst, fmt.Sprintf(" t%d", i))
	}
	e := testenv.New(t, func(c *server.Config) {
		var routes []llm.Route
		for _, n := range llm.SpecModels {
			routes = append(routes, llm.Route{Name: n, Upstream: n, Model: model})
		}
		c.Catalog = llm.NewCatalog(routes...)
	})
	f := &fixture{Env: e}
	agent := f.agent(t, `{"name":"Paced","instructions":"Be brief."}`)

	for _, tc := range []struct {
		name, path, body string
		// token is an event's token, ok false for other events.
		token func(ev sse.Event) (string, bool)
	}{
		{"v2", "/api/v2/agent/" + agent + "/chat", `{"query":"go","conversationId":"paced-v2","streaming":true}`,
			func(ev sse.Event) (string, bool) {
				var m struct{ Type, Value string }
				if json.Unmarshal([]byte(ev.Data), &m) != nil || m.Type != "token" {
					return "", false
				}
				return m.Value, true
			}},
		{"v1", "/api/agents/" + agent + "/query", `{"query":"go","conversationId":"paced-v1","streaming":true}`,
			func(ev sse.Event) (string, bool) {
				if ev.Type != "answer" {
					return "", false
				}
				s, err := url.QueryUnescape(ev.Data)
				require.NoError(t, err)
				return s, true
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, end := model.pace()
			resp := e.Post(tc.path, map[string]string{"Authorization": "Bearer " + e.A.Key, "Accept": "text/event-stream"}, tc.body)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			events := make(chan sse.Event, 1000)
			go func() {
				defer close(events)
				for ev, err := range sse.Read(resp.Body, nil) {
					if err != nil {
						return
					}
					events <- ev
				}
			}()
			// read returns the next token, skipping other events; a bound
			// only so that a broken stream fails instead of hanging.
			read := func(what string) (string, bool) {
				for {
					select {
					case ev, ok := <-events:
						if !ok {
							return "", false
						}
						if tok, ok := tc.token(ev); ok {
							return tok, true
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("no %s reached the client while the model waited", what)
					}
				}
			}
			tok, ok := read("first token")
			require.True(t, ok)
			require.Equal(t, "first", tok, "the first token came before the model sent its second")

			close(next)
			var got []string
			for range model.burst {
				tok, ok := read("token of the burst")
				require.True(t, ok)
				got = append(got, tok)
			}
			require.Equal(t, model.burst, got, "every token of the burst, in order, before the model's pause ends")

			close(end)
			var rest []string
			for ev := range events {
				rest = append(rest, ev.Type+" "+ev.Data)
			}
			require.NotEmpty(t, rest)
			require.Equal(t, " [DONE]", rest[len(rest)-1])
			require.Contains(t, strings.Join(rest, "\n"), "conversationId")
		})
	}
}
