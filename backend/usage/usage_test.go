package usage_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/usage"
)

// Usage outlives what it was made of: deleting a conversation, then its
// agent, leaves today's and this month's turns, tokens and cost as they
// were, the deleted agent's included; another organization's report never
// holds them; and an organization with usage of deleted conversations is
// itself deleted without error.
func TestUsageOutlivesDeletions(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	agent := func(key string) string {
		r := e.Do("POST", "/api/agents", key, map[string]any{"name": "Support", "instructions": "Help."})
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var a struct{ ID string }
		r.JSON(t, &a)
		return a.ID
	}
	chat := func(key, agent, conv string) {
		r := e.Do("POST", "/api/v2/agent/"+agent+"/chat", key, map[string]any{"query": "hello there", "conversationId": conv})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	gone, kept := agent(e.A.Key), agent(e.A.Key)
	chat(e.A.Key, gone, "g1")
	chat(e.A.Key, gone, "g1")
	chat(e.A.Key, gone, "g2")
	chat(e.A.Key, kept, "k1")
	report := func(org uuid.UUID) *usage.Report {
		rep, err := usage.Of(ctx, e.App.Store, org, time.Now())
		require.NoError(t, err)
		return rep
	}
	before := report(e.A.ID)
	require.EqualValues(t, 4, before.Today.Turns)
	require.Positive(t, before.Today.Tokens)
	goneID := uuid.MustParse(gone)
	require.EqualValues(t, 3, before.ByAgent[goneID].Today.Turns)

	r := e.Do("DELETE", "/api/v2/conversations/g1", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, before, report(e.A.ID), "a conversation's deletion changed the usage")
	r = e.Do("DELETE", "/api/agents/"+gone, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	after := report(e.A.ID)
	require.Equal(t, before, after, "an agent's deletion changed the usage")
	require.EqualValues(t, 3, after.ByAgent[goneID].Month.Turns)

	// New turns add to it as before.
	chat(e.A.Key, kept, "k2")
	require.EqualValues(t, 5, report(e.A.ID).Today.Turns)
	require.Zero(t, report(e.B.ID).Today.Turns, "another organization's usage")

	// The organization goes with everything it kept.
	tx, err := e.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "DELETE FROM organizations WHERE id = $1", e.A.ID)
	require.NoError(t, err)
	var left int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM usage_deleted").Scan(&left))
	require.Zero(t, left)
	require.NoError(t, tx.Commit(ctx))
}

// A turn whose conversation is deleted while the model answers cannot store
// its answer (404), but what the model was paid for is counted.
func TestUsageOfAnAnswerWithNowhereToGo(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fake.Reply = func(int, map[string]any) testenv.FakeReply {
		once.Do(func() { close(entered) })
		<-release
		return testenv.FakeReply{Tokens: []string{"a late answer"}}
	}
	e := testenv.New(t, testenv.WithFakeModels(fake))
	r := e.Do("POST", "/api/agents", e.A.Key, map[string]any{"name": "Slow", "instructions": "Answer.", "model": "gpt-4o-mini"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a struct{ ID string }
	r.JSON(t, &a)
	done := make(chan testenv.Response, 1)
	go func() {
		done <- e.Do("POST", "/api/v2/agent/"+a.ID+"/chat", e.A.Key, map[string]any{"query": "hello", "conversationId": "doomed"})
	}()
	<-entered
	r = e.Do("DELETE", "/api/v2/conversations/doomed", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	close(release)
	r = <-done
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)

	rep, err := usage.Of(context.Background(), e.App.Store, e.A.ID, time.Now())
	require.NoError(t, err)
	require.EqualValues(t, 1, rep.Today.Turns, "the answer's turn is counted")
	require.Positive(t, rep.Today.Tokens)
}
