package jobs

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/webhook"
)

// connectFailures signals each connection its pool failed to make.
type connectFailures chan error

func (connectFailures) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (connectFailures) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (connectFailures) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	return ctx
}

func (c connectFailures) TraceConnectEnd(_ context.Context, data pgx.TraceConnectEndData) {
	if data.Err != nil {
		select {
		case c <- data.Err:
		default:
		}
	}
}

// Jobs started while the database is out of reach (a failover as the
// instance starts, or as its migrations are found applied) start once it
// answers. Before, River's start failed and a serving instance ran no job
// until it was restarted, saying so only when it stopped.
func TestJobsStartOnceTheDatabaseAnswers(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))

	ctx := context.Background()
	px := dbtest.NewProxy(t, f.store.Pool.Config().ConnString())
	failed := make(connectFailures, 1)
	pool, err := db.Open(ctx, px.URL, 4, failed)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := New(pool, nil, Config{Workers: true, Webhooks: f.d})
	require.NoError(t, err)

	px.Cut()
	pool.Reset() // River's first statement needs a new connection
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx, 200*time.Millisecond, 10*time.Second) }()
	select {
	case <-failed:
	case err := <-done:
		t.Fatalf("the jobs gave up while the database was out of reach: %v", err)
	}
	px.Restore()

	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
		}
		ds := f.deliveries(t, hook.GetId())
		return len(ds) == 1 && ds[0].GetStatus() == "succeeded"
	}, 20*time.Second, 100*time.Millisecond, "the delivery was never sent")
	stop()
	require.NoError(t, <-done, "the jobs gave up while the database was out of reach")
}

// A delivery whose database is out of reach when its job runs (a
// failover) keeps its attempts: the endpoint was never asked. Before, the
// job failed like a refused attempt, and on the last one River discarded
// it: the delivery stayed pending for good, never sent, its endpoint
// never marked failing.
func TestDeliveryWaitsOutTheDatabase(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))
	ctx := context.Background()
	// Its last attempt comes next.
	_, err := f.store.Pool.Exec(ctx, "UPDATE river_job SET attempt = max_attempts - 1 WHERE kind = $1", DeliverArgs{}.Kind())
	require.NoError(t, err)

	// The deliverer's database is out of reach; River's own is not.
	px := dbtest.NewProxy(t, f.store.Pool.Config().ConnString())
	pool, err := db.Open(ctx, px.URL, 4, nil)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	d := &webhook.Deliverer{Store: &db.Store{Pool: pool}, Sealer: f.d.Sealer, Guard: f.d.Guard}
	c, err := New(f.store.Pool, nil, Config{Workers: true, Webhooks: d})
	require.NoError(t, err)
	px.Cut()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx, 200*time.Millisecond, 10*time.Second) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
	// The attempt ran and ended while the database was out of reach.
	require.Eventually(t, func() bool {
		var ran bool
		err := f.store.Pool.QueryRow(ctx, `SELECT attempted_at IS NOT NULL AND state <> 'running' FROM river_job WHERE kind = $1`,
			DeliverArgs{}.Kind()).Scan(&ran)
		require.NoError(t, err)
		return ran
	}, 10*time.Second, 20*time.Millisecond)
	px.Restore()

	require.Eventually(t, func() bool {
		ds := f.deliveries(t, hook.GetId())
		return len(ds) == 1 && ds[0].GetStatus() == "succeeded"
	}, 20*time.Second, 100*time.Millisecond, "the delivery was never sent")
	require.Len(t, rc.requests(), 1)
}
