package jobs

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/seal"
	"github.com/parleyhq/parley/backend/webhook"
)

// Pausing an endpoint drops the deliveries still in their retries, but it
// does not make the endpoint failing: none of them used up its retries
// against the endpoint, and once resumed it should not show as failing
// ("the endpoint is disabled") until some later delivery succeeds.
func TestPausedEndpointIsNotMarkedFailing(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))
	id := uuid.MustParse(f.deliveries(t, hook.GetId())[0].GetId())

	_, err := f.svc.UpdateWebhook(f.ctx, &parleyv1.UpdateWebhookRequest{Id: hook.GetId(), UpdateMask: mask("enabled"), Enabled: ptr(false)})
	require.NoError(t, err)
	require.NoError(t, f.d.Deliver(context.Background(), f.org, id, 2, false))
	require.Empty(t, rc.requests(), "a paused endpoint was sent a delivery")
	d := f.deliveries(t, hook.GetId())[0]
	require.Equal(t, "failed", d.GetStatus(), "the paused endpoint's delivery is dropped")

	_, err = f.svc.UpdateWebhook(f.ctx, &parleyv1.UpdateWebhookRequest{Id: hook.GetId(), UpdateMask: mask("enabled"), Enabled: ptr(true)})
	require.NoError(t, err)
	got, err := f.svc.GetWebhook(f.ctx, &parleyv1.GetWebhookRequest{Id: hook.GetId()})
	require.NoError(t, err)
	require.False(t, got.GetWebhook().GetFailing(), "pausing marked the endpoint failing: %q", got.GetWebhook().GetLastError())
	require.Empty(t, got.GetWebhook().GetLastError())
}

// A delivery deleted while it is sent, its endpoint kept (its form
// submission deleted, which takes the form.submitted deliveries that
// carried it), ends there, unrecorded, without an error: recording the
// attempt of a delivery that is gone broke the attempts' foreign key, and
// River logged the job as failed and ran it again.
func TestDeliveryDeletedWhileSentEnds(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	var id uuid.UUID
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		require.NoError(t, f.store.TenantTx(context.Background(), f.org, func(tx pgx.Tx, _ *dbq.Queries) error {
			_, err := tx.Exec(context.Background(), "DELETE FROM webhook_deliveries WHERE org_id = $1 AND id = $2", f.org, id)
			return err
		}))
		w.WriteHeader(http.StatusOK)
	})
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))
	id = uuid.MustParse(f.deliveries(t, hook.GetId())[0].GetId())

	require.NoError(t, f.d.Deliver(context.Background(), f.org, id, 1, false))
	require.Len(t, rc.requests(), 1)
	require.Empty(t, f.deliveries(t, hook.GetId()))
	got, err := f.svc.GetWebhook(f.ctx, &parleyv1.GetWebhookRequest{Id: hook.GetId()})
	require.NoError(t, err)
	require.False(t, got.GetWebhook().GetFailing())
}

// A delivery whose signing secret cannot be opened (the instance runs with
// another --secrets-key than the one that sealed it) is not sent, and each
// attempt says why; the last one settles the delivery as failed and marks
// the endpoint failing, as any other attempt that fails. It is not left
// pending, with no attempt listed, after River gives up its job.
func TestUnopenableSecretIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	hook, _ := f.create(t, rc.URL, webhook.FormSubmitted)
	require.NoError(t, f.emit(t, false))
	id := uuid.MustParse(f.deliveries(t, hook.GetId())[0].GetId())

	other := make([]byte, 32)
	other[0] = 1
	wrong, err := seal.New(other)
	require.NoError(t, err)
	d := &webhook.Deliverer{Store: f.d.Store, Sealer: wrong, Guard: f.d.Guard}

	require.ErrorIs(t, d.Deliver(context.Background(), f.org, id, 1, false), webhook.ErrAttempt)
	require.ErrorIs(t, d.Deliver(context.Background(), f.org, id, webhook.MaxAttempts, true), webhook.ErrAttempt)
	require.Empty(t, rc.requests())
	got := f.deliveries(t, hook.GetId())[0]
	require.Equal(t, "failed", got.GetStatus())
	require.Len(t, got.GetAttempts(), 2)
	require.Contains(t, got.GetAttempts()[1].GetError(), "signing secret")
	require.NotContains(t, got.GetAttempts()[1].GetError(), "cipher")
	w, err := f.svc.GetWebhook(f.ctx, &parleyv1.GetWebhookRequest{Id: hook.GetId()})
	require.NoError(t, err)
	require.True(t, w.GetWebhook().GetFailing())
}

// An organization's backlog of deliveries is sent, its share at a time:
// the deliveries River fetches together (all running at once, each
// counting the others) must not all wait for one another. Counted
// symmetrically (every running delivery but itself), a batch of more than
// PerOrg of one organization's saw each other in flight, all snoozed, came
// back together and did it again: none was ever sent.
func TestOrganizationBacklogIsDelivered(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	fast := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	f.create(t, fast.URL, webhook.FormSubmitted)
	const backlog = 8
	for range backlog {
		require.NoError(t, f.emit(t, false))
	}
	f.runSmall(t)
	require.Eventually(t, func() bool { return len(fast.requests()) >= backlog }, 20*time.Second, 50*time.Millisecond,
		"the organization's backlog was not delivered")
}
