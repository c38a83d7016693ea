package contact_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/testenv"
)

// A contact deleted while the agent its conversations belong to is
// deleted: both succeed, never a deadlock told as 409. The agent's
// deletion takes the agent, then deletes its conversations in one order;
// the contact's unlinked the same conversations (ON DELETE SET NULL) in
// another (its index's, newest first), so the two deadlocked as soon as
// they shared two conversations. The contact's deletion now takes the
// agents of its conversations first, as every writer of a conversation
// does.
func TestDeleteContactRacesDeleteAgent(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	const iterations, convs = 40, 12
	for i := range iterations {
		agents := []uuid.UUID{uuid.MustParse(newAgent(t, e, e.A.Key)), uuid.MustParse(newAgent(t, e, e.A.Key))}
		contact := uuid.Must(uuid.NewV7())
		email := fmt.Sprintf("race-%d@example.com", i)
		require.NoError(t, e.App.Store.Tenant(ctx, e.A.ID, func(q *dbq.Queries) error {
			if _, err := q.InsertContact(ctx, dbq.InsertContactParams{OrgID: e.A.ID, ID: contact, Email: &email, CustomFields: []byte("{}")}); err != nil {
				return err
			}
			for n := range convs {
				_, err := q.CreateConversation(ctx, dbq.CreateConversationParams{
					OrgID: e.A.ID, ID: fmt.Sprintf("cr-%d-%02d", i, n), AgentID: agents[n%2], Channel: "api", ContactID: &contact,
				})
				if err != nil {
					return err
				}
			}
			return nil
		}))
		paths := []string{"/api/agents/" + agents[0].String(), "/api/contacts/" + contact.String(), "/api/agents/" + agents[1].String()}
		resps := make([]testenv.Response, len(paths))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for n, p := range paths {
			wg.Go(func() {
				<-start
				resps[n] = e.Do("DELETE", p, e.A.Key, nil)
			})
		}
		close(start)
		wg.Wait()
		for n, r := range resps {
			require.Equal(t, http.StatusOK, r.Status, "iteration %d, DELETE %s: %s", i, paths[n], r.Body)
		}
	}
}

// A contact deleted while chat turns name it (by email) in its
// conversations and the agent is deleted: the deletions succeed, and each
// turn either lands or finds the agent gone (404); never a deadlock or a
// 500.
func TestDeleteContactRacesContactTurns(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	const iterations = 25
	for i := range iterations {
		agent := newAgent(t, e, e.A.Key)
		email := fmt.Sprintf("turn-%d@example.com", i)
		convs := []string{fmt.Sprintf("ct-%d-a", i), fmt.Sprintf("ct-%d-b", i), fmt.Sprintf("ct-%d-c", i)}
		for _, c := range convs {
			chatAs(t, e, e.A.Key, agent, c, map[string]any{"email": email})
		}
		var p pageJSON
		e.Do("GET", "/api/contacts?email="+email, e.A.Key, nil).JSON(t, &p)
		require.Len(t, p.Contacts, 1)
		type req struct {
			method, path string
			body         any
		}
		reqs := []req{{"DELETE", "/api/contacts/" + p.Contacts[0].ID, nil}}
		if i%2 == 0 {
			reqs = append(reqs, req{"DELETE", "/api/agents/" + agent, nil})
		}
		for _, c := range convs {
			reqs = append(reqs, req{"POST", "/api/v2/agent/" + agent + "/chat", map[string]any{"query": "more", "conversationId": c, "contact": map[string]any{"email": email, "firstName": "X"}}})
		}
		resps := make([]testenv.Response, len(reqs))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for n, r := range reqs {
			wg.Go(func() {
				<-start
				resps[n] = e.Do(r.method, r.path, e.A.Key, r.body)
			})
		}
		close(start)
		wg.Wait()
		for n, r := range resps {
			if reqs[n].method == "DELETE" || r.Status != http.StatusOK {
				if reqs[n].method == "POST" && i%2 == 0 && r.Status == http.StatusNotFound {
					continue
				}
				require.Equal(t, http.StatusOK, r.Status, "iteration %d, %s %s: %s", i, reqs[n].method, reqs[n].path, r.Body)
			}
		}
	}
}

// A contact's lead.created delivery replayed while the contact is deleted:
// the replay's copy, committed while the deletion waits for it, goes with
// the contact. The deletion takes the deliveries in a statement before the
// one that deletes them, so that the latter sees the copy.
func TestReplayRacesDeleteContact(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": "https://203.0.113.7/hook", "events": []string{"lead.created"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var hook struct{ ID string }
	r.JSON(t, &hook)
	chatAs(t, e, e.A.Key, newAgent(t, e, e.A.Key), "replayed", map[string]any{"email": "replayed@example.com"})
	r = e.Do("GET", "/api/contacts?email=replayed@example.com", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var p pageJSON
	r.JSON(t, &p)
	require.Len(t, p.Contacts, 1)
	contact := p.Contacts[0].ID
	carrying := func() int {
		var n int
		require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries
				WHERE org_id = $1 AND convert_from(body, 'UTF8')::jsonb #>> '{data,id}' = $2`, e.A.ID, contact).Scan(&n)
		}))
		return n
	}
	require.Equal(t, 1, carrying())

	// The replay under way (its statements, uncommitted), as
	// ReplayWebhookDelivery makes them.
	tx, err := e.App.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
	require.NoError(t, err)
	q := dbq.New(tx)
	_, err = q.KeyShareWebhook(ctx, dbq.KeyShareWebhookParams{OrgID: e.A.ID, ID: uuid.MustParse(hook.ID)})
	require.NoError(t, err)
	var delivery uuid.UUID
	require.NoError(t, tx.QueryRow(ctx, `SELECT id FROM webhook_deliveries WHERE org_id = $1 AND event_type = 'lead.created'`, e.A.ID).Scan(&delivery))
	d, err := q.KeyShareWebhookDelivery(ctx, dbq.KeyShareWebhookDeliveryParams{OrgID: e.A.ID, ID: delivery})
	require.NoError(t, err)
	_, err = q.CreateWebhookDelivery(ctx, dbq.CreateWebhookDeliveryParams{
		OrgID: e.A.ID, ID: uuid.New(), WebhookID: d.WebhookID, EventID: d.EventID, EventType: d.EventType, Body: d.Body,
	})
	require.NoError(t, err)

	deleted := make(chan testenv.Response, 1)
	go func() { deleted <- e.Do("DELETE", "/api/contacts/"+contact, e.A.Key, nil) }()
	dbtest.WaitForLockWait(t, e.App.Pool, "")
	require.NoError(t, tx.Commit(ctx))
	got := <-deleted
	require.Equal(t, http.StatusOK, got.Status, "%s", got.Body)
	require.Equal(t, 0, carrying(), "the replay's copy went with the contact")
}
