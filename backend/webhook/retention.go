package webhook

import (
	"context"
	"time"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// DefaultRetention is how long a delivery is kept, with the body it sent
// and its attempts, unless configured (--webhook-retention): long enough
// to look into a failure and replay it, after which what a body holds (a
// conversation's messages, a form's values) is not kept on for ever, even
// when the conversation or submission itself was deleted meanwhile.
const DefaultRetention = 30 * 24 * time.Hour

// pruneBatch bounds one transaction of Prune: a backlog is deleted in
// short transactions rather than one long one.
const pruneBatch = 1000

// Prune deletes, in every organization, the deliveries created before
// before and finished (succeeded or failed), or still pending two days
// after it (past every retry: a job lost, or never run), with their
// attempts, and returns how many. Deliveries locked meanwhile (being sent,
// or deleted with their endpoint) wait for the next run. It is the
// retention job's (backend/jobs), and stops between batches when ctx ends.
func Prune(ctx context.Context, store *db.Store, before time.Time) (int64, error) {
	return db.InBatches(ctx, pruneBatch, func() (n int64, err error) {
		err = store.ExpiredDeliveries(ctx, before, func(q *dbq.Queries) (err error) {
			n, err = q.PruneWebhookDeliveries(ctx, dbq.PruneWebhookDeliveriesParams{Before: before, MaxRows: pruneBatch})
			return err
		})
		return n, err
	})
}
