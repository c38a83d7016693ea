package jobs

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/auth"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/webhook"
)

// One organization's endpoints that hang (up to webhook.AttemptTimeout
// each) do not hold up another organization's event, queued after a
// backlog of them: it is delivered within seconds. Without a share of the
// workers per organization, an owner's public agent (its visitors' turns
// emit message.created to up to MaxWebhooks endpoints each) made every
// other organization's webhooks late by as long as it liked. And with the
// share, the backlog's deliveries wait behind the others'. River fetches
// by scheduled_at: with only PerOrg of an
// organization's deliveries sent at once, the rest of a backlog queued
// earlier were fetched, found over the share and snoozed a few at a time,
// and another organization's delivery waited until the whole backlog had
// been fetched once (minutes for a backlog of thousands: a public agent's
// visitors' turns emit to up to MaxWebhooks endpoints each).
func TestOrganizationBacklogDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	f := setupHooks(t, false)
	ctx := context.Background()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	fast := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	f.create(t, slow.URL, webhook.FormSubmitted)
	const backlog = 300
	for range backlog {
		require.NoError(t, f.emit(t, false))
	}

	f.runSmall(t)
	// The organization's share is taken by its hanging deliveries.
	require.Eventually(t, func() bool { return len(slow.requests()) >= 2 }, 10*time.Second, 20*time.Millisecond)

	orgB, _, err := account.Bootstrap(ctx, f.store, "B", "pro")
	require.NoError(t, err)
	ctxB := auth.WithPrincipal(ctx, &auth.Principal{OrgID: orgB, Scopes: []string{"admin"}})
	hookB, err := f.svc.CreateWebhook(ctxB, &parleyv1.CreateWebhookRequest{Url: fast.URL, Events: []string{webhook.FormSubmitted}})
	require.NoError(t, err)
	start := time.Now()
	_, err = f.svc.TestWebhook(ctxB, &parleyv1.TestWebhookRequest{Id: hookB.GetWebhook().GetId()})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(fast.requests()) == 1 }, 60*time.Second, 50*time.Millisecond)
	took := time.Since(start)
	require.Less(t, took, 5*time.Second, "organization B's delivery waited %s behind A's backlog of %d", took, backlog)
}
