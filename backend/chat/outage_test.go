package chat_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/dbtest"
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
	time.Sleep(400 * time.Millisecond) // the question is stored, the model answering
	px.Cut()
	time.Sleep(1500 * time.Millisecond) // the answer is complete at about 0.9 s
	px.Restore()
	r := <-done
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "Stored after all.", r.rep.Answer)
	content, incomplete := lastAnswer(t, f, "outage")
	require.Equal(t, "Stored after all.", content)
	require.False(t, incomplete)
}
