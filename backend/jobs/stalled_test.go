package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/embed"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/netguard"
	"github.com/parleyhq/parley/backend/seal"
	"github.com/parleyhq/parley/backend/webhook"
)

// A process killed during an ingestion's last attempt (out of memory on a
// huge document) recorded nothing, and River's rescuer discards such a
// job: the datasource stayed running for good. The leader's periodic job
// fails it, in every organization, with datasource.failed as any failure;
// a datasource whose job is still alive, or changed within its job's
// timeout, is left alone.
func TestLostIngestionsFail(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	k := knowledge.New(store, embed.Lexical{}, netguard.New(netguard.Config{}))
	c, err := New(pool, k, Config{Workers: true, Store: store})
	require.NoError(t, err)
	k.Hooks = &webhook.Emitter{Jobs: c}

	orgA, _, err := account.Bootstrap(ctx, store, "A", "pro")
	require.NoError(t, err)
	orgB, _, err := account.Bootstrap(ctx, store, "B", "pro")
	require.NoError(t, err)
	sealer, err := seal.New(make([]byte, 32))
	require.NoError(t, err)
	svc := &webhook.Service{Store: store, Sealer: sealer, Guard: webhook.NewGuard(netguard.Config{Allow: loopback}), Hooks: k.Hooks}
	actx := auth.WithPrincipal(ctx, &auth.Principal{OrgID: orgA, Scopes: []string{"admin"}})
	hook, err := svc.CreateWebhook(actx, &parleyv1.CreateWebhookRequest{Url: "http://127.0.0.1:9/", Events: []string{webhook.DatasourceFailed}})
	require.NoError(t, err)

	// datasource makes one in org, status since ago, with an ingestion job
	// in state ("" for none).
	datasource := func(org uuid.UUID, status string, ago time.Duration, state string) uuid.UUID {
		t.Helper()
		id, store_ := uuid.New(), uuid.New()
		require.NoError(t, store.TenantTx(ctx, org, func(tx pgx.Tx, q *dbq.Queries) error {
			if _, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{OrgID: org, ID: store_, Name: "s", EmbeddingModel: embed.Lexical{}.Model(), EmbeddingDim: embed.LexicalDim}); err != nil {
				return err
			}
			if _, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: org, ID: id, DatastoreID: store_, Type: "text", Name: "t", Config: []byte("{}"), Content: []byte("text")}); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE datasources SET status = $1, updated_at = now() - $2::interval WHERE id = $3", status, ago.String(), id)
			return err
		}))
		if state == "" {
			return id
		}
		job, err := c.River().Insert(ctx, IngestArgs{OrgID: org, DatasourceID: id}, nil)
		require.NoError(t, err)
		// As a worker that crashed on the last attempt left it, once River's
		// rescuer came (discarded), or while it runs (running).
		_, err = pool.Exec(ctx, `UPDATE river_job SET state = $1::river_job_state, attempt = 5,
			attempted_at = CASE WHEN $1::text = 'running' THEN now() ELSE now() - $2::interval END,
			attempted_by = '{crashed}', finalized_at = CASE WHEN $1::text = 'discarded' THEN now() END WHERE id = $3`,
			state, ago.String(), job.Job.ID)
		require.NoError(t, err)
		return id
	}
	lostA := datasource(orgA, "running", time.Hour, "discarded")
	lostB := datasource(orgB, "pending", time.Hour, "discarded")
	live := datasource(orgA, "running", time.Hour, "running")
	recent := datasource(orgA, "running", time.Minute, "discarded") // within its attempt's timeout
	done := datasource(orgA, "synced", time.Hour, "")

	// Another organization's transaction naming the cutoff sees none of A's.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true), set_config('app.ingest_stalled_before', $2, true)",
		orgB.String(), time.Now().UTC().Format(time.RFC3339Nano))
	require.NoError(t, err)
	var seen int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM datasources WHERE org_id = $1", orgA).Scan(&seen))
	require.Zero(t, seen)
	require.NoError(t, tx.Rollback(ctx))

	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(runCtx, 200*time.Millisecond, 10*time.Second) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-stopped) })

	status := func(org, id uuid.UUID) (r dbq.GetDatasourceRow) {
		require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) (err error) {
			r, err = q.GetDatasource(ctx, dbq.GetDatasourceParams{OrgID: org, ID: id})
			return err
		}))
		return r
	}
	require.Eventually(t, func() bool {
		return status(orgA, lostA).Status == "error" && status(orgB, lostB).Status == "error"
	}, 30*time.Second, 100*time.Millisecond, "the leader's job never failed the lost ingestions")
	require.Equal(t, stalledMessage, status(orgA, lostA).Error)
	require.Equal(t, "running", status(orgA, live).Status)
	require.Equal(t, "running", status(orgA, recent).Status)
	require.Equal(t, "synced", status(orgA, done).Status)

	list, err := svc.ListWebhookDeliveries(actx, &parleyv1.ListWebhookDeliveriesRequest{WebhookId: hook.GetWebhook().GetId()})
	require.NoError(t, err)
	require.Len(t, list.GetDeliveries(), 1)
	require.Equal(t, webhook.DatasourceFailed, list.GetDeliveries()[0].GetEventType())

	// A sync since the sweep read it (a new job, the datasource pending
	// again) is not failed.
	r := status(orgA, live)
	ok, err := k.FailStalled(ctx, orgA, live, r.UpdatedAt.Add(-time.Second), stalledMessage)
	require.NoError(t, err)
	require.False(t, ok)
}
