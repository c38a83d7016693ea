package chat_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
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

// The database lost while the model answers, and back a second later: the
// answer, generated and paid for, is stored when the connection returns,
// and the client gets it, rather than a 503 that would have it ask the
// model again.
func TestAnswerStoredAfterAShortOutage(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"Stored ", "after ", "all."}, Delay: 300 * time.Millisecond}
	}
	px := dbtest.NewProxy(t, dbtest.New(t))
	f := &fixture{Env: testenv.NewOn(t, px.URL, testenv.WithFakeModels(fake)), fake: fake}
	f.private = f.agent(t, `{"name":"Private","instructions":"You are private."}`)

	type result struct {
		status int
		rep    reply
		body   string
	}
	done := make(chan result, 1)
	go func() {
		status, rep, raw := f.chat(t, f.private, f.A.Key, `{"query":"q","conversationId":"outage"}`)
		done <- result{status, rep, string(raw.Body)}
	}()
	// The question is stored before the model is called: cut once it is.
	require.Eventually(t, func() bool { return len(fake.Requests()) > 0 }, 10*time.Second, 10*time.Millisecond)
	px.Cut()
	time.Sleep(1500 * time.Millisecond) // the answer is complete 0.9 s after the call
	px.Restore()
	r := <-done
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "Stored after all.", r.rep.Answer)
	content, incomplete := lastAnswer(t, f, "outage")
	require.Equal(t, "Stored after all.", content)
	require.False(t, incomplete)
}

// A Connect stream whose client stops reading: its writes fail at their
// deadline, the turn ends and what was generated is stored as incomplete,
// rather than the turn holding its slot for as long as the client stays
// connected (connect's Send heeds no context).
func TestConnectStreamNobodyReadsEnds(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{strings.Repeat("many words ", 400)}, Forever: true}
	}
	e := testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) { c.StreamWriteTimeout = 300 * time.Millisecond })
	f := &fixture{Env: e, fake: fake}
	f.private = f.agent(t, `{"name":"Private","instructions":"You are private."}`)

	msg, err := json.Marshal(map[string]string{"agentId": f.private, "query": "talk", "conversationId": "unread"})
	require.NoError(t, err)
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	_, err = fmt.Fprintf(conn, "POST /parley.v1.ChatService/ChatStream HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\n"+
		"Connect-Protocol-Version: 1\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", f.A.Key, len(body), body)
	require.NoError(t, err)
	// Never read: the turn must end on its own.
	require.Eventually(t, func() bool { return fake.Canceled() > 0 }, 30*time.Second, 50*time.Millisecond,
		"the model was still called for a client that reads nothing")
	// What went out before the socket's buffers filled is megabytes (3.8
	// MB here): counted and stored in a few seconds under -race.
	content, incomplete := lastAnswerWithin(t, f, "unread", 30*time.Second)
	require.True(t, incomplete)
	require.NotEmpty(t, content)
}
