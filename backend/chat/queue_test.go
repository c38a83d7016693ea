package chat_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// rejections reads parley_chat_turn_rejections_total{reason} from the
// instance's metrics.
func rejections(t *testing.T, e *testenv.Env, reason string) int {
	t.Helper()
	h, err := e.App.MetricsHandler()
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	m := regexp.MustCompile(`(?m)^parley_chat_turn_rejections_total\{reason="` + reason + `"\} (\d+)$`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// With two turn slots and one place to wait: the third turn waits, the
// fourth is refused at once with 503 OVERLOADED and retryAfter on every
// transport (REST v2 JSON and SSE, v1 JSON and stream, Connect and gRPC as
// unavailable); a waiting client that goes away leaves the queue (its turn
// never reaches the model), and waiting turns run when slots free.
func TestTurnQueue(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	fake.Reply = func(int, map[string]any) testenv.FakeReply {
		<-release // the model blocks until the test lets it answer
		return testenv.FakeReply{Tokens: []string{"Answered."}}
	}
	e := testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) {
		// One organization alone: its share is the whole queue.
		c.MaxTurns, c.TurnQueue, c.OrgTurnShare = 2, 1, 100
	})
	f := &fixture{Env: e, fake: fake}
	agent := f.agent(t, `{"name":"Queued","instructions":"Be brief."}`)
	q := e.App.TurnQueue()

	type result struct {
		status int
		body   string
	}
	start := func(ctx context.Context, conv string) <-chan result {
		out := make(chan result, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", e.URL+"/api/v2/agent/"+agent+"/chat",
				strings.NewReader(`{"query":"hi","conversationId":"`+conv+`"}`))
			req.Header.Set("Authorization", "Bearer "+e.A.Key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				out <- result{status: -1, body: err.Error()}
				return
			}
			defer resp.Body.Close()
			var b strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
			out <- result{status: resp.StatusCode, body: b.String()}
		}()
		return out
	}

	running1, running2 := start(context.Background(), "q-1"), start(context.Background(), "q-2")
	require.Eventually(t, func() bool { return len(fake.Requests()) == 2 && q.Running() == 2 }, 10*time.Second, 5*time.Millisecond)
	leaving, leave := context.WithCancel(context.Background())
	gone := start(leaving, "q-gone")
	require.Eventually(t, func() bool { return q.Waiting() == 1 }, 10*time.Second, 5*time.Millisecond)

	// Full: every transport refuses at once.
	full := rejections(t, e, "queue_full")
	path := "/api/v2/agent/" + agent + "/chat"
	for _, tc := range []struct {
		name, path, body string
		headers          map[string]string
	}{
		{"v2 JSON", path, `{"query":"hi","conversationId":"q-x"}`, nil},
		{"v2 SSE", path, `{"query":"hi","conversationId":"q-x","streaming":true}`, map[string]string{"Accept": "text/event-stream"}},
		{"v1 JSON", "/api/agents/" + agent + "/query", `{"query":"hi"}`, nil},
		{"v1 stream", "/api/agents/" + agent + "/query", `{"query":"hi","streaming":true}`, nil},
	} {
		headers := map[string]string{"Authorization": "Bearer " + e.A.Key}
		for k, v := range tc.headers {
			headers[k] = v
		}
		resp := e.Post(tc.path, headers, tc.body)
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", tc.name, b.String())
		require.Equal(t, "1", resp.Header.Get("Retry-After"), tc.name)
		require.Contains(t, b.String(), `"code":"OVERLOADED"`, tc.name)
		require.Contains(t, b.String(), `"retryAfter":1`, tc.name)
	}
	for _, opts := range [][]connect.ClientOption{nil, {connect.WithGRPC()}} {
		client := http.DefaultClient
		if opts != nil {
			client = testenv.H2C()
		}
		c := parleyv1connect.NewChatServiceClient(client, e.URL, append(opts, connect.WithInterceptors(testenv.Bearer(e.A.Key)))...)
		_, err := c.Chat(context.Background(), &parleyv1.ChatRequest{AgentId: agent, Query: "hi", ConversationId: "q-x"})
		require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
		var ce *connect.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "1", ce.Meta().Get("Retry-After"))
		require.NotEmpty(t, ce.Details(), "a RetryInfo detail")
	}
	require.Equal(t, full+6, rejections(t, e, "queue_full"))

	// The waiting client leaves: its place frees, and another may wait.
	leave()
	require.Eventually(t, func() bool { return q.Waiting() == 0 }, 10*time.Second, 5*time.Millisecond)
	waiting := start(context.Background(), "q-3")
	require.Eventually(t, func() bool { return q.Waiting() == 1 }, 10*time.Second, 5*time.Millisecond)

	// The model answers: the running turns end and the waiting one runs.
	free()
	for _, ch := range []<-chan result{running1, running2, waiting} {
		r := <-ch
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, "Answered.")
	}
	require.Equal(t, -1, (<-gone).status, "the client that left got no answer")
	require.Len(t, fake.Requests(), 3, "the turn whose client left never reached the model")
	require.Empty(t, messagesOf(t, f, "q-gone"), "nor stored anything")
	require.Equal(t, 0, q.Running())
}

// One organization's traffic cannot take the whole queue: with two slots,
// two places to wait and the default share (half of them), organization
// A's public agent's visitors run two turns, and their next ones are
// refused at once with 503 OVERLOADED and retryAfter (reason org_share),
// though places to wait are free; a turn of organization B still gets in,
// waits for a slot and is answered. Without the share, A's turns took both
// places and B's turn was refused (queue_full).
func TestTurnQueueShareByOrg(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	fake.Reply = func(int, map[string]any) testenv.FakeReply {
		<-release
		return testenv.FakeReply{Tokens: []string{"Answered."}}
	}
	e := testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) { c.MaxTurns, c.TurnQueue = 2, 2 })
	t.Cleanup(free) // before the instance stops: it waits for the turns
	f := &fixture{Env: e, fake: fake}
	public := f.agent(t, `{"name":"Busy","instructions":"Be brief.","visibility":"public"}`)
	ofB := f.agentOf(t, e.B.Key)
	q := e.App.TurnQueue()

	type result struct {
		status int
		body   string
	}
	start := func(agent, key, body string) <-chan result {
		out := make(chan result, 1)
		go func() {
			headers := map[string]string{}
			if key != "" {
				headers["Authorization"] = "Bearer " + key
			}
			resp := e.Post("/api/v2/agent/"+agent+"/chat", headers, body)
			defer resp.Body.Close()
			var b strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
			out <- result{status: resp.StatusCode, body: b.String()}
		}()
		return out
	}
	visitor := func(n int) <-chan result {
		id := strconv.Itoa(n)
		return start(public, "", `{"query":"hi","conversationId":"share-`+id+`","visitorId":"v`+id+`"}`)
	}
	within := func(ch <-chan result) result {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("the turn was not answered within 10 s (it waited for a slot?)")
			return result{}
		}
	}

	running := []<-chan result{visitor(1), visitor(2)}
	require.Eventually(t, func() bool { return len(fake.Requests()) == 2 && q.Running() == 2 }, 10*time.Second, 5*time.Millisecond)

	// A holds its share: its next turns are refused, not queued.
	shared := rejections(t, e, "org_share")
	for n := 3; n <= 4; n++ {
		r := within(visitor(n))
		require.Equal(t, http.StatusServiceUnavailable, r.status, r.body)
		require.Contains(t, r.body, `"code":"OVERLOADED"`)
		require.Contains(t, r.body, `"retryAfter":1`)
	}
	require.Equal(t, shared+2, rejections(t, e, "org_share"))
	require.Equal(t, 0, q.Waiting(), "A's refused turns hold no place")

	// B still gets in: it waits for a slot A's turns will free.
	waiting := start(ofB, e.B.Key, `{"query":"hi","conversationId":"share-b"}`)
	require.Eventually(t, func() bool { return q.Waiting() == 1 }, 10*time.Second, 5*time.Millisecond)

	free()
	for _, ch := range append(running, waiting) {
		r := within(ch)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, "Answered.")
	}
	// Its turns over, A has its share again.
	r := within(visitor(5))
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, 0, q.Running())
}
