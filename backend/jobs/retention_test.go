package jobs

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/webhook"
)

// Deliveries finished before the retention period are deleted with their
// attempts, in every organization, by the periodic job a worker runs at
// start; newer ones stay, and pending ones until two days past the cutoff
// (their retries), and a pruned delivery's
// id is then unknown (404), not another organization's (403).
func TestRetentionDeletesExpiredDeliveries(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	ctx := context.Background()
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	hookA, _ := f.create(t, rc.URL, webhook.FormSubmitted)

	orgB, _, err := account.Bootstrap(ctx, f.store, "B", "pro")
	require.NoError(t, err)
	ctxB := auth.WithPrincipal(ctx, &auth.Principal{OrgID: orgB, Scopes: []string{"admin"}})
	respB, err := f.svc.CreateWebhook(ctxB, &parleyv1.CreateWebhookRequest{Url: rc.URL, Events: []string{webhook.FormSubmitted}})
	require.NoError(t, err)
	hookB := respB.GetWebhook()

	// emit writes one delivery of org's endpoint (nothing sends it: no
	// worker runs yet) and sets its status and age as given.
	emit := func(org uuid.UUID, status string, age time.Duration) uuid.UUID {
		t.Helper()
		sub := &parleyv1.Submission{Id: uuid.NewString(), FormId: uuid.NewString(), Values: &structpb.Struct{}}
		var id uuid.UUID
		require.NoError(t, f.store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
			if err := f.svc.Hooks.Emit(ctx, tx, org, webhook.FormSubmitted, webhook.Of(sub)); err != nil {
				return err
			}
			err := tx.QueryRow(ctx, `UPDATE webhook_deliveries SET status = $1, created_at = now() - $2::interval
				WHERE id = (SELECT id FROM webhook_deliveries ORDER BY id DESC LIMIT 1) RETURNING id`,
				status, age.String()).Scan(&id)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO webhook_attempts (org_id, delivery_id, attempt, status_code) VALUES ($1, $2, 1, 200)`, org, id)
			return err
		}))
		// Its job would send it again: only the rows matter here.
		_, err := f.store.Pool.Exec(ctx, "DELETE FROM river_job WHERE kind = 'webhook_delivery'")
		require.NoError(t, err)
		return id
	}
	day := 24 * time.Hour
	oldSucceeded := emit(f.org, "succeeded", 40*day)
	oldFailed := emit(f.org, "failed", 31*day)
	retrying := emit(f.org, "pending", 31*day) // within its retries of the cutoff: kept
	stuck := emit(f.org, "pending", 33*day)    // past them (a job lost): its body goes
	recent := emit(f.org, "succeeded", 10*day)
	oldOfB := emit(orgB, "failed", 35*day)

	// What the job's transaction may see: the expired deliveries of every
	// organization, nothing else of any of them.
	tx, err := f.store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT set_config('app.webhook_expired_before', $1, true)", time.Now().Add(-30*day).UTC().Format(time.RFC3339Nano))
	require.NoError(t, err)
	var deliveries, hooks, attempts int
	require.NoError(t, tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_deliveries), (SELECT count(*) FROM webhooks),
		(SELECT count(*) FROM webhook_attempts)`).Scan(&deliveries, &hooks, &attempts))
	require.Equal(t, 4, deliveries)
	require.Zero(t, hooks)
	require.Zero(t, attempts)
	require.NoError(t, tx.Rollback(ctx))

	c, err := New(f.store.Pool, nil, Config{Workers: true, Webhooks: f.d, Store: f.store, WebhookRetention: 30 * day})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx, 200*time.Millisecond, 10*time.Second) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	left := func(org uuid.UUID, hook string) map[uuid.UUID]bool {
		ids := map[uuid.UUID]bool{}
		p := auth.WithPrincipal(ctx, &auth.Principal{OrgID: org, Scopes: []string{"admin"}})
		resp, err := f.svc.ListWebhookDeliveries(p, &parleyv1.ListWebhookDeliveriesRequest{WebhookId: hook})
		require.NoError(t, err)
		for _, d := range resp.GetDeliveries() {
			ids[uuid.MustParse(d.GetId())] = true
		}
		return ids
	}
	require.Eventually(t, func() bool { return len(left(f.org, hookA.GetId())) == 2 && len(left(orgB, hookB.GetId())) == 0 },
		20*time.Second, 100*time.Millisecond, "the job runs when the workers start")
	require.Equal(t, map[uuid.UUID]bool{retrying: true, recent: true}, left(f.org, hookA.GetId()))

	require.NoError(t, f.store.TenantTx(ctx, f.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		return tx.QueryRow(ctx, "SELECT count(*) FROM webhook_attempts").Scan(&attempts)
	}))
	require.Equal(t, 2, attempts, "the pruned deliveries' attempts went with them")

	for _, id := range []uuid.UUID{oldSucceeded, oldFailed, stuck} {
		_, err := f.svc.ReplayWebhookDelivery(f.ctx, &parleyv1.ReplayWebhookDeliveryRequest{WebhookId: hookA.GetId(), DeliveryId: id.String()})
		require.Equal(t, apperr.NotFound, apperr.CodeOf(err), "a pruned delivery is unknown: %v", err)
	}
	_, err = f.svc.ReplayWebhookDelivery(ctxB, &parleyv1.ReplayWebhookDeliveryRequest{WebhookId: hookB.GetId(), DeliveryId: oldOfB.String()})
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
}

// The sweep passes over a delivery another transaction holds (one being
// sent, or deleted with its endpoint) rather than wait for it, and takes it
// on a later run; a tenant transaction that also names a cutoff sees no
// other organization's deliveries through the sweep's policies.
func TestRetentionSkipsLockedDeliveries(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	ctx := context.Background()
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	f.create(t, rc.URL, webhook.FormSubmitted)
	var ids []uuid.UUID
	for range 2 {
		require.NoError(t, f.emit(t, false))
		require.NoError(t, f.store.TenantTx(ctx, f.org, func(tx pgx.Tx, _ *dbq.Queries) error {
			var id uuid.UUID
			err := tx.QueryRow(ctx, `UPDATE webhook_deliveries SET status = 'succeeded', created_at = now() - interval '40 days'
				WHERE id = (SELECT id FROM webhook_deliveries ORDER BY id DESC LIMIT 1) RETURNING id`).Scan(&id)
			ids = append(ids, id)
			return err
		}))
	}
	_, err := f.store.Pool.Exec(ctx, "DELETE FROM river_job WHERE kind = 'webhook_delivery'")
	require.NoError(t, err)
	cutoff := time.Now().Add(-30 * 24 * time.Hour)

	// Another organization's transaction naming a cutoff sees nothing of A.
	orgB, _, err := account.Bootstrap(ctx, f.store, "B", "pro")
	require.NoError(t, err)
	both, err := f.store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer both.Rollback(ctx) //nolint:errcheck
	_, err = both.Exec(ctx, "SELECT set_config('app.org_id', $1, true), set_config('app.webhook_expired_before', $2, true)",
		orgB.String(), cutoff.UTC().Format(time.RFC3339Nano))
	require.NoError(t, err)
	var seen int
	require.NoError(t, both.QueryRow(ctx, "SELECT count(*) FROM webhook_deliveries").Scan(&seen))
	require.Zero(t, seen)
	require.NoError(t, both.Rollback(ctx))

	held, err := f.store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer held.Rollback(ctx) //nolint:errcheck
	_, err = held.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.org.String())
	require.NoError(t, err)
	_, err = held.Exec(ctx, "SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE", ids[0])
	require.NoError(t, err)

	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := webhook.Prune(pctx, f.store, cutoff)
	require.NoError(t, err, "the sweep waited on the held delivery")
	require.EqualValues(t, 1, n)
	require.NoError(t, held.Rollback(ctx))
	n, err = webhook.Prune(ctx, f.store, cutoff)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the held one, on the next run")
}
