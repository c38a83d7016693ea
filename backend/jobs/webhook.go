package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/parleyhq/parley/backend/db"
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
	// Pool reads River's jobs, and PerOrg is how many of one
	// organization's deliveries may be sent at once across the deployment
	// (fairShare); 0 leaves them unbounded.
	Pool   *pgxpool.Pool
	PerOrg int
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
	if w.D == nil {
		// A process without a Deliverer runs no deliveries' queue (New):
		// should one reach it anyway, it waits for one that has it.
		return river.JobSnooze(fairWaitDelivery)
	}
	if wait := w.fairShare(ctx, job); wait > 0 {
		return river.JobSnooze(wait)
	}
	err := w.D.Deliver(ctx, job.Args.OrgID, job.Args.DeliveryID, job.Attempt, job.Attempt >= job.MaxAttempts)
	switch {
	case errors.Is(err, webhook.ErrInterrupted):
		// Cut short by shutdown: run again as soon as a worker can,
		// without spending one of the delivery's attempts (River's
		// advice for interrupted jobs).
		return river.JobSnooze(0)
	case db.Unavailable(err):
		// The database out of reach (a failover): the endpoint did not
		// fail, so the attempt is not spent. Spent, the last one left
		// the delivery pending for good (River discarded its job), never
		// sent nor failed. An attempt sent whose record was lost is sent
		// again under its number (RecordWebhookAttempt replaces it).
		return river.JobSnooze(unavailableWait)
	}
	return err
}

// unavailableWait is how long a delivery whose database was out of reach
// waits before it runs again.
const unavailableWait = 5 * time.Second

// fairWaitDelivery is how long a delivery whose organization already has
// its share of deliveries in flight waits before it asks again.
const fairWaitDelivery = time.Second

// fairShare is how long job must wait for one of its organization's
// deliveries in flight to end, or 0 to send it now: at most PerOrg of an
// organization's deliveries are sent at once (counted in River's table,
// every instance's). Without it, one organization's endpoints that answer
// slowly (webhook.AttemptTimeout each), fed by its public agents'
// visitors, held every delivery worker, and every other organization's
// events waited behind them. Only attempts begun within twice a
// delivery's limit count, so that jobs of a crashed worker (running until
// River rescues them) do not hold their organization's line. A waiting
// delivery keeps its attempts (River counts no snooze). A failed count
// lets the job run.
//
// Only the deliveries running ahead of job count: fetched before it, or
// in its batch (River gives a batch one attempted_at) with a lower id.
// Counting every other one, a batch of more than PerOrg of one
// organization's saw each other, all snoozed, came back together and did
// it again, none ever sent; counted in order, the first always goes, and
// at most PerOrg pass at once.
func (w *DeliverWorker) fairShare(ctx context.Context, job *river.Job[DeliverArgs]) time.Duration {
	if w.PerOrg <= 0 || w.Pool == nil || job.AttemptedAt == nil {
		return 0
	}
	var running int
	err := w.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job
		WHERE state = 'running' AND queue = $1 AND kind = $2 AND args->>'org_id' = $3 AND id <> $4
		  AND (attempted_at, id) < ($6::timestamptz, $4)
		  AND attempted_at > now() - make_interval(secs => $5)`,
		QueueWebhooks, DeliverArgs{}.Kind(), job.Args.OrgID.String(), job.ID, 2*w.Timeout(job).Seconds(), *job.AttemptedAt).Scan(&running)
	if err != nil {
		slog.WarnContext(ctx, "webhook delivery: counting the organization's deliveries in flight", "err", err)
		return 0
	}
	if running < w.PerOrg {
		return 0
	}
	w.demote(ctx, job)
	return fairWaitDelivery
}

// backlogPriority is the River priority (1 first, 4 last) of the
// deliveries of an organization found over its share: they are fetched
// after every other organization's (priority 1) that are due.
const backlogPriority = 4

// demote gives job and its organization's other deliveries waiting (not
// yet demoted) backlogPriority. River fetches by priority, then by
// scheduled_at: without it, another organization's delivery queued after
// a backlog waited until every delivery of the backlog had been fetched,
// counted over the share and snoozed, a few per fetch (minutes for a
// backlog of thousands), since a snooze moves back only the delivery
// fetched. The backlog is then sent as workers are free of the others'
// (webhooks promise no order), at most PerOrg at once as before; an
// organization's deliveries queued later start at priority 1 again.
// Snoozes and retries keep a job's priority. A failed update is logged:
// the delivery still waits its turn.
func (w *DeliverWorker) demote(ctx context.Context, job *river.Job[DeliverArgs]) {
	// SKIP LOCKED: a job River is fetching or completing meanwhile (or
	// another worker demoting) is neither waited for nor deadlocked with;
	// it is demoted the next time.
	_, err := w.Pool.Exec(ctx, `UPDATE river_job SET priority = $4
		WHERE id IN (SELECT id FROM river_job
		  WHERE state IN ('available', 'scheduled', 'retryable', 'running') AND queue = $1 AND priority < $4
		    AND kind = $2 AND args->>'org_id' = $3
		  FOR UPDATE SKIP LOCKED)`,
		QueueWebhooks, DeliverArgs{}.Kind(), job.Args.OrgID.String(), backlogPriority)
	if err != nil {
		slog.WarnContext(ctx, "webhook delivery: moving the organization's backlog behind the others", "err", err)
	}
}
