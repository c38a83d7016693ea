package webhook_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/webhook"
)

// An endpoint deleted while an event is emitted costs the event's
// transaction nothing: it commits (a chat turn keeps its answer), the
// deleted endpoint simply gets no delivery, the one kept gets each event,
// and the delete and a test event sent to the endpoint at the same time
// answer as if they had come one after the other (never a 500). Each round
// starts the emitting transaction, the delete and the test event together;
// every other round also holds the emitter between its read of the
// subscribed endpoints and its writes until the delete has committed
// (the narrowest window, hit every time).
func TestEmitRacingDeleteCommits(t *testing.T) {
	t.Parallel()
	const rounds = 100
	e := testenv.New(t, allowLoopback)
	// Three requests a round: within the enterprise plan's rate limit.
	org := e.Bootstrap("Racing", "enterprise")
	ctx := context.Background()
	rcv := newSink(t)
	keep := subscribe(t, e, org.Key, rcv, webhook.FormSubmitted)
	// The Emitter's cache says A has endpoints from the first round on,
	// while they are being deleted: a stale answer must not matter.
	jobs := &recorder{}
	hooks := &webhook.Emitter{Jobs: jobs}

	for i := range rounds {
		gone := subscribe(t, e, org.Key, rcv, webhook.FormSubmitted)
		start, deleted := make(chan struct{}), make(chan struct{})
		var (
			wg                    sync.WaitGroup
			emitErr               error
			delStatus, testStatus int
			delBody, testBody     []byte
		)
		wg.Add(3)
		go func() {
			defer wg.Done()
			<-start
			emitErr = e.App.Store.TenantTx(ctx, org.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
				return hooks.Emit(ctx, tx, org.ID, webhook.FormSubmitted, func() (proto.Message, error) {
					if i%2 == 1 {
						// Wait for the delete, or not for long if it waits
						// for this transaction.
						select {
						case <-deleted:
						case <-time.After(200 * time.Millisecond):
						}
					}
					return &parleyv1.Submission{Id: uuid.NewString()}, nil
				})
			})
		}()
		go func() {
			defer wg.Done()
			defer close(deleted)
			<-start
			r := e.Do("DELETE", "/api/webhooks/"+gone, org.Key, nil)
			delStatus, delBody = r.Status, r.Body
		}()
		go func() {
			defer wg.Done()
			<-start
			r := e.Do("POST", "/api/webhooks/"+gone+"/test", org.Key, nil)
			testStatus, testBody = r.Status, r.Body
		}()
		close(start)
		wg.Wait()
		require.NoError(t, emitErr, "round %d: the emitting transaction failed", i)
		require.Equal(t, http.StatusOK, delStatus, "round %d: %s", i, delBody)
		require.Contains(t, []int{http.StatusAccepted, http.StatusNotFound}, testStatus, "round %d: %s", i, testBody)
	}

	// Every event reached the endpoint that stayed; nothing is left of the
	// deleted ones.
	require.NoError(t, e.App.Store.TenantTx(ctx, org.ID, func(_ pgx.Tx, q *dbq.Queries) error {
		ds, err := q.ListWebhookDeliveries(ctx, dbq.ListWebhookDeliveriesParams{OrgID: org.ID, WebhookID: uuid.MustParse(keep), MaxRows: 2 * rounds})
		require.NoError(t, err)
		require.Len(t, ds, rounds)
		n, err := q.CountWebhooks(ctx, org.ID)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		return nil
	}))
}
