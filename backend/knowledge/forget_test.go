package knowledge

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// forgetEnv is an organization with one conversation, and another
// organization, whose messages tests write directly.
type forgetEnv struct {
	k      *Knowledge
	store  *db.Store
	org    uuid.UUID
	other  uuid.UUID
	convID string
}

func setupForget(t *testing.T) forgetEnv {
	t.Helper()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	e := forgetEnv{k: New(store, embed.Lexical{}, netguard.New(netguard.Config{})), store: store, convID: "c1"}
	// Two messages a transaction: the walk crosses batches.
	e.k.forgetBatch = 2
	var err error
	e.org, _, err = account.Bootstrap(ctx, store, "A", "pro")
	require.NoError(t, err)
	e.other, _, err = account.Bootstrap(ctx, store, "B", "pro")
	require.NoError(t, err)
	for _, org := range []uuid.UUID{e.org, e.other} {
		require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
			agent := uuid.New()
			if _, err := q.CreateAgent(ctx, dbq.CreateAgentParams{OrgID: org, ID: agent, Name: "a", Instructions: "i", Model: "m",
				Tools: []string{}, Visibility: "private", AllowedOrigins: []string{}}); err != nil {
				return err
			}
			_, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: org, ID: e.convID, AgentID: agent, Channel: "api"})
			return err
		}))
	}
	return e
}

// message stores a message of role in org's conversation, citing sources.
func (e forgetEnv) message(t *testing.T, org uuid.UUID, role string, sources ...map[string]any) uuid.UUID {
	t.Helper()
	if sources == nil {
		sources = []map[string]any{}
	}
	raw, err := json.Marshal(sources)
	require.NoError(t, err)
	id, err := uuid.NewV7()
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, e.store.Tenant(ctx, org, func(q *dbq.Queries) error {
		_, err := q.CreateMessage(ctx, dbq.CreateMessageParams{OrgID: org, ID: id, ConversationID: e.convID, Role: role,
			Content: "c", Channel: "api", Attachments: []byte("[]"), Sources: raw})
		return err
	}))
	return id
}

// stored is a message's sources and its row version (xmin: a new one
// whenever the row is written).
type stored struct {
	sources []map[string]any
	raw     string
	version string
}

// messages reads org's messages.
func (e forgetEnv) messages(t *testing.T, org uuid.UUID) map[uuid.UUID]stored {
	t.Helper()
	ctx := context.Background()
	out := map[uuid.UUID]stored{}
	require.NoError(t, e.store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
		rows, err := tx.Query(ctx, `SELECT id, sources::text, xmin::text FROM messages WHERE org_id = $1`, org)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id uuid.UUID
			var s stored
			if err := rows.Scan(&id, &s.raw, &s.version); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(s.raw), &s.sources); err != nil {
				return err
			}
			out[id] = s
		}
		return rows.Err()
	}))
	return out
}

func source(ds uuid.UUID, text string) map[string]any {
	return map[string]any{
		"source": "vault.md", "score": 0.8, "datasourceName": "vault", "datasourceId": ds.String(),
		"chunk": text, "excerpt": text[:10], "heading": "Vault > " + text[:5], "title": "Vault", "url": "https://example.com/vault",
	}
}

// ForgetCited takes out the text of the deleted datasources' passages
// only: the citations stay, the other datasources' passages, other roles'
// messages and other organizations' are untouched, and a second run
// writes nothing.
func TestForgetCitedChangesOnlyTheDeletedDatasourcesText(t *testing.T) {
	t.Parallel()
	e := setupForget(t)
	ctx := context.Background()
	gone, gone2, kept := uuid.New(), uuid.New(), uuid.New()

	e.message(t, e.org, "user")
	both := e.message(t, e.org, "assistant", source(gone, "The combination is 7749."), source(kept, "The manager opens it."))
	onlyKept := e.message(t, e.org, "assistant", source(kept, "The manager opens it."))
	e.message(t, e.org, "user")
	second := e.message(t, e.org, "assistant", source(gone2, "The key is under the mat."))
	bare := source(gone, "The combination is 7749.")
	delete(bare, "chunk")
	delete(bare, "excerpt")
	delete(bare, "heading")
	already := e.message(t, e.org, "assistant", bare)
	e.message(t, e.org, "assistant")
	otherOrg := e.message(t, e.other, "assistant", source(gone, "The combination is 7749."))

	before, beforeOther := e.messages(t, e.org), e.messages(t, e.other)
	n, err := e.k.ForgetCited(ctx, e.org, []uuid.UUID{gone, gone2}, uuid.Nil)
	require.NoError(t, err)
	if got, want := n, int64(2); got != want {
		t.Fatalf("answers changed: got %d, want %d", got, want)
	}
	after := e.messages(t, e.org)
	for id, b := range before {
		a := after[id]
		switch id {
		case both, second:
			require.NotEqual(t, b.version, a.version, "a citing answer is written")
			require.Len(t, a.sources, len(b.sources))
			cited := a.sources[0]
			for _, k := range []string{"chunk", "excerpt", "heading"} {
				require.NotContains(t, cited, k, "the deleted datasource's text: %s", a.raw)
			}
			for _, k := range []string{"datasourceId", "datasourceName", "source", "url", "score", "title"} {
				require.Equal(t, b.sources[0][k], cited[k], "the citation stays: %s", a.raw)
			}
			if id == both {
				require.Equal(t, b.sources[1], a.sources[1], "another datasource's passage keeps its text, in its place")
			}
		default:
			require.Equal(t, b, a, "message %s untouched", id)
		}
	}
	require.Contains(t, after, onlyKept)
	require.Contains(t, after, already)
	require.Equal(t, beforeOther, e.messages(t, e.other), "another organization's answer %s untouched", otherOrg)

	n, err = e.k.ForgetCited(ctx, e.org, []uuid.UUID{gone, gone2}, uuid.Nil)
	require.NoError(t, err)
	require.Zero(t, n, "a second run changes nothing")
	require.Equal(t, after, e.messages(t, e.org), "a second run writes no row")

	// An organization since deleted: nothing to do, no error.
	n, err = e.k.ForgetCited(ctx, uuid.New(), []uuid.UUID{gone}, uuid.Nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

// The late pass reads only the messages after the one it is given.
func TestForgetCitedAfter(t *testing.T) {
	t.Parallel()
	e := setupForget(t)
	ctx := context.Background()
	gone := uuid.New()
	early := e.message(t, e.org, "assistant", source(gone, "The combination is 7749."))
	late := e.message(t, e.org, "assistant", source(gone, "The combination is 7749."))

	n, err := e.k.ForgetCited(ctx, e.org, []uuid.UUID{gone}, early)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	got := e.messages(t, e.org)
	require.Contains(t, got[early].sources[0], "chunk", "before the bound: not read")
	require.NotContains(t, got[late].sources[0], "chunk")
}

// delivery stores a webhook delivery of event to an endpoint of org whose
// body carries a message citing sources, as webhook.Emitter writes it.
func (e forgetEnv) delivery(t *testing.T, org uuid.UUID, event string, sources ...map[string]any) uuid.UUID {
	t.Helper()
	if sources == nil {
		sources = []map[string]any{}
	}
	body, err := json.Marshal(map[string]any{"type": event, "timestamp": "2026-11-27T10:00:00.000Z",
		"data": map[string]any{"id": "m1", "role": "assistant", "content": "The answer.", "sources": sources}})
	require.NoError(t, err)
	id, err := uuid.NewV7()
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, e.store.Tenant(ctx, org, func(q *dbq.Queries) error {
		hook := uuid.New()
		if _, err := q.CreateWebhook(ctx, dbq.CreateWebhookParams{OrgID: org, ID: hook, Url: "https://example.com/hook",
			Events: []string{event}, Secret: []byte("sealed")}); err != nil {
			return err
		}
		_, err := q.CreateWebhookDelivery(ctx, dbq.CreateWebhookDeliveryParams{OrgID: org, ID: id, WebhookID: hook,
			EventID: "msg_" + id.String(), EventType: event, Body: body})
		return err
	}))
	return id
}

// bodies reads org's deliveries' bodies.
func (e forgetEnv) bodies(t *testing.T, org uuid.UUID) map[uuid.UUID]string {
	t.Helper()
	ctx := context.Background()
	out := map[uuid.UUID]string{}
	require.NoError(t, e.store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
		rows, err := tx.Query(ctx, `SELECT id, body FROM webhook_deliveries WHERE org_id = $1`, org)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id uuid.UUID
			var body []byte
			if err := rows.Scan(&id, &body); err != nil {
				return err
			}
			out[id] = string(body)
		}
		return rows.Err()
	}))
	return out
}

// A message.created delivery keeps its body for retries and replays until
// retention: the deleted datasources' text leaves it too, as it leaves
// the answer; the rest of the body, other datasources' passages, other
// events and other organizations' deliveries are untouched.
func TestForgetCitedLeavesWebhookDeliveries(t *testing.T) {
	t.Parallel()
	e := setupForget(t)
	ctx := context.Background()
	gone, kept := uuid.New(), uuid.New()
	cites := e.delivery(t, e.org, "message.created", source(gone, "The combination is 7749."), source(kept, "The manager opens it."))
	onlyKept := e.delivery(t, e.org, "message.created", source(kept, "The manager opens it."))
	otherEvent := e.delivery(t, e.org, "conversation.created")
	otherOrg := e.delivery(t, e.other, "message.created", source(gone, "The combination is 7749."))
	before, beforeOther := e.bodies(t, e.org), e.bodies(t, e.other)

	n, err := e.k.ForgetCited(ctx, e.org, []uuid.UUID{gone}, uuid.Nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	after := e.bodies(t, e.org)
	require.NotContains(t, after[cites], "7749", "the deleted datasource's text left the delivery")
	var was, is map[string]any
	require.NoError(t, json.Unmarshal([]byte(before[cites]), &was))
	require.NoError(t, json.Unmarshal([]byte(after[cites]), &is))
	wasSources := was["data"].(map[string]any)["sources"].([]any)
	isSources := is["data"].(map[string]any)["sources"].([]any)
	require.Len(t, isSources, 2)
	cited := isSources[0].(map[string]any)
	for _, k := range []string{"chunk", "excerpt", "heading"} {
		require.NotContains(t, cited, k)
	}
	require.Equal(t, gone.String(), cited["datasourceId"], "the citation stays")
	require.Equal(t, wasSources[1], isSources[1], "another datasource's passage keeps its text")
	is["data"].(map[string]any)["sources"], was["data"].(map[string]any)["sources"] = nil, nil
	require.Equal(t, was, is, "the rest of the body is unchanged")
	require.Equal(t, before[onlyKept], after[onlyKept])
	require.Equal(t, before[otherEvent], after[otherEvent])
	require.Equal(t, beforeOther, e.bodies(t, e.other), "another organization's delivery %s untouched", otherOrg)

	n, err = e.k.ForgetCited(ctx, e.org, []uuid.UUID{gone}, uuid.Nil)
	require.NoError(t, err)
	require.Zero(t, n, "a second run changes nothing")
}

// A message.created delivery replayed while the forget job takes a
// deleted datasource's text out of it: the copy the replay makes loses
// the text too. The job's UPDATE did not wait for the replay's FOR KEY
// SHARE, and the copy, committed after it, kept the text and sent it again.
func TestForgetCitedRacesReplay(t *testing.T) {
	t.Parallel()
	e := setupForget(t)
	ctx := context.Background()
	gone := uuid.New()
	original := e.delivery(t, e.org, "message.created", source(gone, "The combination is 7749."))

	// The replay under way (ReplayWebhookDelivery's statements,
	// uncommitted): the endpoint and the delivery held, the copy written.
	tx, err := e.store.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.org.String())
	require.NoError(t, err)
	q := dbq.New(tx)
	held, err := q.GetWebhookDelivery(ctx, dbq.GetWebhookDeliveryParams{OrgID: e.org, ID: original})
	require.NoError(t, err)
	_, err = q.KeyShareWebhook(ctx, dbq.KeyShareWebhookParams{OrgID: e.org, ID: held.WebhookID})
	require.NoError(t, err)
	d, err := q.KeyShareWebhookDelivery(ctx, dbq.KeyShareWebhookDeliveryParams{OrgID: e.org, ID: original})
	require.NoError(t, err)
	copyID, err := uuid.NewV7()
	require.NoError(t, err)
	_, err = q.CreateWebhookDelivery(ctx, dbq.CreateWebhookDeliveryParams{
		OrgID: e.org, ID: copyID, WebhookID: d.WebhookID, EventID: d.EventID, EventType: d.EventType, Body: d.Body,
	})
	require.NoError(t, err)

	forgot := make(chan error, 1)
	go func() {
		_, err := e.k.ForgetCited(ctx, e.org, []uuid.UUID{gone}, uuid.Nil)
		forgot <- err
	}()
	// The job waits for the replay (or, unfixed, is done without).
	var done bool
	for i := 0; !done; i++ {
		require.Less(t, i, 2000, "the job neither waits for a lock nor ends after 20 s")
		var n int
		require.NoError(t, e.store.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		if n > 0 {
			break
		}
		select {
		case err := <-forgot:
			require.NoError(t, err)
			done = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.NoError(t, tx.Commit(ctx))
	if !done {
		require.NoError(t, <-forgot)
	}
	bodies := e.bodies(t, e.org)
	require.Len(t, bodies, 2)
	require.NotContains(t, bodies[original], "7749")
	require.NotContains(t, bodies[copyID], "7749", "the replay's copy lost the deleted datasource's text too")
}
