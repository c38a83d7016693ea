package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/parleyhq/parley/backend/webhook"
)

// DeliverArgs is the job that sends one webhook delivery.
type DeliverArgs struct {
	OrgID      uuid.UUID `json:"org_id"`
	DeliveryID uuid.UUID `json:"delivery_id"`
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return "webhook_delivery" }

// InsertOpts: an attempt and one per retry of webhook.Schedule, on their
// own queue so that a slow endpoint never holds up ingestion.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: webhook.MaxAttempts, Queue: QueueWebhooks}
}

// QueueWebhooks is the queue of webhook deliveries.
const QueueWebhooks = "webhooks"

// DeliverWorker sends webhook deliveries.
type DeliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	D *webhook.Deliverer
	// nextRetry replaces webhook.NextRetry in tests that retry at once.
	nextRetry func(attempt int) time.Time
}

// Timeout implements river.Worker: one attempt's limit, and time to
// record it.
func (w *DeliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return webhook.AttemptTimeout + 10*time.Second
}

// NextRetry implements river.Worker: webhook.Schedule's back-off.
func (w *DeliverWorker) NextRetry(job *river.Job[DeliverArgs]) time.Time {
	if w.nextRetry != nil {
		return w.nextRetry(job.Attempt)
	}
	return webhook.NextRetry(job.Attempt, time.Now())
}

// Work implements river.Worker.
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	err := w.D.Deliver(ctx, job.Args.OrgID, job.Args.DeliveryID, job.Attempt, job.Attempt >= job.MaxAttempts)
	if errors.Is(err, webhook.ErrInterrupted) {
		// Cut short by shutdown: run again as soon as a worker can,
		// without spending one of the delivery's attempts (River's
		// advice for interrupted jobs).
		return river.JobSnooze(0)
	}
	return err
}
