package chat_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// gatedEmbedder embeds lexically; while armed, each call says so on
// waiting and waits for release: a remote embedder taking its time.
type gatedEmbedder struct {
	embed.Lexical
	armed   atomic.Bool
	waiting chan struct{}
	release chan struct{}
}

func (g *gatedEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if g.armed.Load() {
		select {
		case g.waiting <- struct{}{}:
		default:
		}
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Lexical.Embed(ctx, texts)
}

// A turn of an agent with knowledge embeds the question before any
// transaction of the search: while a remote embedder answers, the question
// is already stored and no connection sits idle in a transaction (a
// turn's held its pooled connection and, on its transactional path, the
// new conversation's row for the embedding's round trip). Both load paths:
// a turn carrying a contact takes the transactional one.
func TestTurnEmbedsTheQuestionOutsideTransactions(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	gate := &gatedEmbedder{waiting: make(chan struct{}, 1), release: make(chan struct{})}
	f := &fixture{Env: testenv.New(t, testenv.WithWorkers, testenv.WithFakeModels(fake), func(c *server.Config) { c.Embedder = gate }), fake: fake}
	ctx := context.Background()
	store, _ := f.datastore(t, "Opening hours are nine to five on weekdays.")
	agent := f.agent(t, fmt.Sprintf(`{"name":"K","instructions":"i","datastores":[%q]}`, store))
	gate.armed.Store(true)
	// A failing test's turns are let go, so its server can close.
	t.Cleanup(func() { close(gate.release) })

	for _, tc := range []struct{ name, body string }{
		{"one trip", `{"query":"When are you open?","conversationId":"plain"}`},
		{"transaction", `{"query":"When are you open?","conversationId":"contact","contact":{"email":"ada@example.com"}}`},
	} {
		type result struct {
			status int
			rep    reply
		}
		done := make(chan result, 1)
		go func() {
			status, rep, _ := f.chat(t, agent, f.A.Key, tc.body)
			done <- result{status, rep}
		}()
		select {
		case <-gate.waiting:
		case r := <-done:
			t.Fatalf("%s: the turn ended (%d) without embedding its question", tc.name, r.status)
		}
		conv := map[string]string{"one trip": "plain", "transaction": "contact"}[tc.name]
		var questions int
		require.NoError(t, f.App.Store.Tenant(ctx, f.A.ID, func(q *dbq.Queries) error {
			msgs, err := q.ListMessages(ctx, dbq.ListMessagesParams{OrgID: f.A.ID, ConversationID: conv, MaxRows: 10})
			questions = len(msgs)
			return err
		}), tc.name)
		require.Equal(t, 1, questions, "%s: the question is stored before it is embedded", tc.name)
		require.Eventually(t, func() bool {
			var idle int
			require.NoError(t, f.App.Store.Pool.QueryRow(ctx,
				`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()`).Scan(&idle))
			return idle == 0
		}, 5*time.Second, 20*time.Millisecond, "%s: a transaction waits on the embedder", tc.name)
		gate.release <- struct{}{}
		r := <-done
		require.Equal(t, http.StatusOK, r.status, tc.name)
		require.NotEmpty(t, r.rep.Sources, "%s: the passage is found once embedded", tc.name)
	}
}
