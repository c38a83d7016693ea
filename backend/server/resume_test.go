package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// A conversation's stream opened without Last-Event-ID (what is to come)
// and ended by its instance's shutdown before any event came resumes on
// another instance where it began: what was written between the two
// streams reaches the client. The stream's opening carries its starting
// point as its SSE id (EventSource sends back the last id it received as
// Last-Event-ID; a comment carries none): without it, a client that
// reconnected without Last-Event-ID started again from the events then to
// come, and a person's reply written while it reconnected never reached it.
func TestQuietStreamResumesOnAnotherInstance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := dbtest.New(t)
	two := testenv.NewOn(t, dbURL)
	one, err := server.New(ctx, server.Config{DatabaseURL: dbURL, ShutdownTimeout: 5 * time.Second, LastUsedFlush: time.Hour})
	require.NoError(t, err)
	t.Cleanup(one.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, sigterm := context.WithCancel(ctx)
	defer sigterm()
	served := make(chan error, 1)
	go func() { served <- one.Serve(serveCtx, ln) }()

	key := two.A.Key
	r := two.Do("POST", "/api/agents", key, `{"name":"Support","instructions":"Help."}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ag struct{ ID string }
	r.JSON(t, &ag)
	r = two.Do("POST", "/api/v2/agent/"+ag.ID+"/chat", key, `{"query":"Where is my order?","conversationId":"quiet-1"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	// The stream on the first instance, from now on: it sees no event
	// before the instance shuts down.
	open := func(base, lastEventID string) (*http.Response, *bufio.Reader) {
		req, err := http.NewRequest(http.MethodGet, base+"/api/v2/conversations/quiet-1/events", nil)
		require.NoError(t, err)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Authorization", "Bearer "+key)
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp, bufio.NewReader(resp.Body)
	}
	// lastID is what an EventSource keeps as its last event id: an id
	// field's value once its block ends (SSE: with or without data).
	lastID, pending := "", ""
	read := func(br *bufio.Reader) (line string, ok bool) {
		l, err := br.ReadString('\n')
		if err != nil {
			return "", false
		}
		l = strings.TrimRight(l, "\r\n")
		if v, ok := strings.CutPrefix(l, "id:"); ok {
			pending = strings.TrimPrefix(v, " ")
		}
		if l == "" && pending != "" {
			lastID, pending = pending, ""
		}
		return l, true
	}
	_, br := open("http://"+ln.Addr().String(), "")
	for {
		l, ok := read(br)
		require.True(t, ok, "the stream ended before it was ready")
		if l == ": ready" {
			break
		}
	}
	sigterm()
	for {
		if _, ok := read(br); !ok {
			break // the shutdown ended the stream
		}
	}
	require.NoError(t, <-served)

	// Meanwhile, a person replies through the other instance.
	const reply = "A person's reply while the client reconnected."
	r = two.Do("POST", "/api/v2/conversations/quiet-1/messages", key, map[string]string{"text": reply})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

	// The client reconnects to the other instance, as EventSource does.
	require.NotEmpty(t, lastID, "the stream never said where it began: its client cannot resume")
	_, br = open(two.URL, lastID)
	deadline := time.AfterFunc(10*time.Second, func() { t.Error("no reply within 10 s") })
	defer deadline.Stop()
	for {
		l, ok := read(br)
		require.True(t, ok, "the stream ended")
		data, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type    string
			Message struct{ Role, Text string }
		}
		require.NoError(t, json.Unmarshal([]byte(data), &ev), data)
		if ev.Type == "message" && ev.Message.Role == "human" {
			require.Equal(t, reply, ev.Message.Text)
			return
		}
	}
}
