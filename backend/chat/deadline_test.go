package chat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// storedMessage is one stored message of a conversation of A.
type storedMessage struct {
	Role, Content string
	Incomplete    bool
}

// asA is a transaction that reads organization A's rows as its tenant
// transaction would. The caller rolls it back when done (it holds one of
// the app's connections); the test's end does, else.
func asA(t *testing.T, f *fixture) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := f.App.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.A.ID.String())
	require.NoError(t, err)
	return tx
}

// messagesOf reads what a conversation of A holds, oldest first.
func messagesOf(t *testing.T, f *fixture, conv string) []storedMessage {
	t.Helper()
	ctx := context.Background()
	tx := asA(t, f)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	rows, err := tx.Query(ctx, `SELECT role, content, incomplete FROM messages WHERE conversation_id = $1 ORDER BY created_at, id`, conv)
	require.NoError(t, err)
	defer rows.Close()
	var out []storedMessage
	for rows.Next() {
		var m storedMessage
		require.NoError(t, rows.Scan(&m.Role, &m.Content, &m.Incomplete))
		out = append(out, m)
	}
	require.NoError(t, rows.Err())
	return out
}

// A provider that never answers holds a turn no longer than the configured
// deadline: JSON gets 504 UPSTREAM_TIMEOUT, a stream starts at once (status,
// headers and a comment before the deadline) and ends with an error event;
// the question is stored, an answer only when some text was generated, and
// then marked incomplete.
func TestTurnDeadline(t *testing.T) {
	t.Parallel()
	const deadline = 2 * time.Second
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) { c.TurnTimeout = deadline })
	f := &fixture{Env: e, fake: fake}
	f.private = f.agent(t, `{"name":"Slow","instructions":"i"}`)
	// The query names the behaviour: "hang" never sends a byte, "drip"
	// sends a token every 100 ms for ever.
	fake.Reply = func(_ int, body map[string]any) testenv.FakeReply {
		msgs := body["messages"].([]any)
		last := msgs[len(msgs)-1].(map[string]any)["content"]
		if last == "drip" {
			return testenv.FakeReply{Tokens: []string{"tick "}, Delay: 100 * time.Millisecond, Forever: true}
		}
		return testenv.FakeReply{Tokens: []string{"never"}, Delay: time.Hour}
	}
	chatPath := "/api/v2/agent/" + f.private + "/chat"

	t.Run("json hang", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		status, _, raw := f.chat(t, f.private, f.A.Key, `{"query":"hang","conversationId":"dl-json"}`)
		require.Equal(t, http.StatusGatewayTimeout, status, "%s", raw.Body)
		require.GreaterOrEqual(t, time.Since(start), deadline, "failed before the deadline")
		eb := raw.Err(t)
		require.Equal(t, "UPSTREAM_TIMEOUT", eb.Error.Code)
		require.Contains(t, eb.Error.Message, "2s")
		require.Equal(t, []storedMessage{{Role: "user", Content: "hang"}}, messagesOf(t, f, "dl-json"))
	})

	t.Run("stream hang", func(t *testing.T) {
		t.Parallel()
		resp := f.Post(chatPath, bearer(f.A.Key), `{"query":"hang","conversationId":"dl-sse","streaming":true}`)
		defer resp.Body.Close()
		// The status came before the deadline's error: 200 and a stream.
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.True(t, bytes.HasPrefix(body, []byte(": waiting for the model\n\n")), "the stream did not start with a comment: %q", body)
		evs := testenv.ReadSSE(t, bytes.NewReader(body))
		require.Len(t, evs, 2, "%q", body)
		var ev struct {
			Type  string
			Error struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal([]byte(evs[0].Data), &ev))
		require.Equal(t, "error", ev.Type)
		require.Equal(t, "UPSTREAM_TIMEOUT", ev.Error.Code)
		require.Equal(t, "[DONE]", evs[1].Data)
		require.Equal(t, []storedMessage{{Role: "user", Content: "hang"}}, messagesOf(t, f, "dl-sse"))
	})

	t.Run("stream drip", func(t *testing.T) {
		t.Parallel()
		resp := f.Post(chatPath, bearer(f.A.Key), `{"query":"drip","conversationId":"dl-drip","streaming":true}`)
		defer resp.Body.Close()
		evs := testenv.ReadSSE(t, resp.Body)
		require.Greater(t, len(evs), 3)
		var last struct {
			Type  string
			Error struct{ Code string }
		}
		require.NoError(t, json.Unmarshal([]byte(evs[len(evs)-2].Data), &last))
		require.Equal(t, "error", last.Type)
		require.Equal(t, "UPSTREAM_TIMEOUT", last.Error.Code)
		require.Equal(t, "[DONE]", evs[len(evs)-1].Data)
		msgs := messagesOf(t, f, "dl-drip")
		require.Len(t, msgs, 2)
		require.Equal(t, "assistant", msgs[1].Role)
		require.True(t, msgs[1].Incomplete)
		require.Contains(t, msgs[1].Content, "tick tick")
	})

	t.Run("json drip", func(t *testing.T) {
		t.Parallel()
		status, _, raw := f.chat(t, f.private, f.A.Key, `{"query":"drip","conversationId":"dl-json-drip"}`)
		require.Equal(t, http.StatusGatewayTimeout, status, "%s", raw.Body)
		require.Equal(t, "UPSTREAM_TIMEOUT", raw.Err(t).Error.Code)
		msgs := messagesOf(t, f, "dl-json-drip")
		require.Len(t, msgs, 2)
		require.True(t, msgs[1].Incomplete, "a cut answer is kept as incomplete")
	})

	t.Run("connect and grpc", func(t *testing.T) {
		t.Parallel()
		for _, opts := range [][]connect.ClientOption{nil, {connect.WithGRPC()}} {
			c := parleyv1connect.NewChatServiceClient(testenv.H2C(), f.URL, append(opts, connect.WithInterceptors(testenv.Bearer(f.A.Key)))...)
			_, err := c.Chat(context.Background(), &parleyv1.ChatRequest{AgentId: f.private, Query: "hang", ConversationId: "dl-connect"})
			require.Equal(t, connect.CodeDeadlineExceeded, connect.CodeOf(err), "%v", err)
		}
	})
}

// A turn's deadline counts from its arrival, its wait for a slot included:
// a JSON turn sends nothing before its answer, and the whole request must
// end within --turn-timeout (under a proxy's idle timeout). Counted from
// the slot, a turn that waited most of it then had all of it again.
func TestTurnDeadlineCountsTheWaitForASlot(t *testing.T) {
	t.Parallel()
	const deadline = 2 * time.Second
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) {
		c.TurnTimeout, c.MaxTurns, c.TurnQueue = deadline, 1, 4
	})
	f := &fixture{Env: e, fake: fake}
	f.private = f.agent(t, `{"name":"Slow","instructions":"i"}`)
	// "first" holds the one slot for 1.2 s; "second" waits for it, then
	// gets an answer that takes as long.
	fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"slow", " answer"}, Delay: 600 * time.Millisecond}
	}
	done := make(chan int, 1)
	go func() {
		status, _, _ := f.chat(t, f.private, f.A.Key, `{"query":"first","conversationId":"dl-q1"}`)
		done <- status
	}()
	require.Eventually(t, func() bool { return len(fake.Requests()) == 1 }, 5*time.Second, 5*time.Millisecond)
	start := time.Now()
	status, _, raw := f.chat(t, f.private, f.A.Key, `{"query":"second","conversationId":"dl-q2"}`)
	took := time.Since(start)
	require.Equal(t, http.StatusOK, <-done)
	require.Equal(t, http.StatusGatewayTimeout, status, "%s", raw.Body)
	require.Less(t, took, deadline+deadline/2, "the turn outlived its deadline by its wait for a slot")
}

// A turn's deadline bounds fetching its attachments: a server sending a
// file a byte at a time held the turn, its slot and its attachment budget
// for the fetch's own 15 s timeout, past a shorter deadline. The turn fails
// with 504 UPSTREAM_TIMEOUT at its deadline, before anything is stored.
func TestTurnDeadlineBoundsAttachments(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) {
		c.TurnTimeout = deadline
		c.AttachmentFetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	f := &fixture{Env: e, fake: fake}
	f.private = f.agent(t, `{"name":"Private","instructions":"i"}`)
	drip := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		for range 300 {
			if _, err := w.Write([]byte("a")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(drip.Close)
	start := time.Now()
	status, _, raw := f.chat(t, f.private, f.A.Key, `{"query":"q","conversationId":"dl-att","attachments":[{"url":"`+drip.URL+`/slow.txt"}]}`)
	took := time.Since(start)
	require.Equal(t, http.StatusGatewayTimeout, status, "%s", raw.Body)
	require.Equal(t, "UPSTREAM_TIMEOUT", raw.Err(t).Error.Code)
	require.Less(t, took, deadline+deadline/2, "the attachment's fetch outlived the turn's deadline")
	require.Empty(t, messagesOf(t, f, "dl-att"))
	require.Empty(t, fake.Requests())
}
