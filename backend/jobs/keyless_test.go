package jobs

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/webhook"
)

// A process that runs jobs without a Deliverer (a worker started without
// --secrets-key) leaves the deliveries for a process that has one, as
// Config.Webhooks says: it does not fetch them. It fetched them and failed
// each with River's unknown-kind error, spending the delivery's attempts
// (River's default back-off, not webhook.Schedule) until River discarded
// it: the delivery stayed pending for good, never sent, no attempt listed,
// though a process with the key was running.
func TestWorkerWithoutDelivererLeavesDeliveries(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	ctx := context.Background()
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))

	keyless, err := New(f.store.Pool, nil, Config{Workers: true, Store: f.store})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- keyless.Run(runCtx, 200*time.Millisecond, 10*time.Second) }()
	time.Sleep(3 * time.Second)
	cancel()
	require.NoError(t, <-done)

	var attempts int
	var state string
	require.NoError(t, f.store.Pool.QueryRow(ctx,
		`SELECT attempt, state FROM river_job WHERE kind = $1`, DeliverArgs{}.Kind()).Scan(&attempts, &state))
	require.Zero(t, attempts, "a worker without a deliverer spent an attempt of the delivery (state %s)", state)

	f.run(t)
	require.Eventually(t, func() bool { return len(rc.requests()) == 1 }, 15*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		ds := f.deliveries(t, hook.GetId())
		return len(ds) == 1 && ds[0].GetStatus() == "succeeded"
	}, 10*time.Second, 50*time.Millisecond)
}

// A delivery left running by a process that died while sending it is
// rescued by River's leader, which may be a process without a Deliverer:
// it retries it for a process that has one, as it would its own. It
// discarded it (River's rescuer discards a kind it has no worker for):
// the delivery stayed pending for good, never sent.
func TestWorkerWithoutDelivererRescuesStuckDeliveries(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	ctx := context.Background()
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))
	// As a worker that crashed mid-attempt two hours ago left it.
	_, err := f.store.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1,
		attempted_at = now() - interval '2 hours', attempted_by = '{crashed}' WHERE kind = $1`, DeliverArgs{}.Kind())
	require.NoError(t, err)

	keyless, err := New(f.store.Pool, nil, Config{Workers: true, Store: f.store})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- keyless.Run(runCtx, 200*time.Millisecond, 10*time.Second) }()
	var state string
	require.Eventually(t, func() bool {
		require.NoError(t, f.store.Pool.QueryRow(ctx, `SELECT state FROM river_job WHERE kind = $1`, DeliverArgs{}.Kind()).Scan(&state))
		return state != "running"
	}, 20*time.Second, 100*time.Millisecond, "the leader's rescuer never ran")
	cancel()
	require.NoError(t, <-done)
	// Retried: retryable, or already available again when River's
	// scheduler ran before the poll saw it; not discarded.
	require.Contains(t, []string{"retryable", "available"}, state, "the leader without a deliverer gave up the delivery")

	_, err = f.store.Pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() WHERE kind = $1`, DeliverArgs{}.Kind())
	require.NoError(t, err)
	f.run(t)
	require.Eventually(t, func() bool {
		ds := f.deliveries(t, hook.GetId())
		return len(ds) == 1 && ds[0].GetStatus() == "succeeded"
	}, 15*time.Second, 50*time.Millisecond)
}
