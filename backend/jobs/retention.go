package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/webhook"
)

// PruneArgs is the periodic job that deletes webhook deliveries older than
// the retention period (webhook.Prune).
type PruneArgs struct{}

// Kind implements river.JobArgs.
func (PruneArgs) Kind() string { return "webhook_retention" }

// InsertOpts: on the deliveries' queue, one try (the next period is the
// retry), and at most one waiting or running at a time.
func (PruneArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueWebhooks, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByPeriod: pruneEvery}}
}

// pruneEvery is how often the retention job runs (and at each start of
// River's leader).
const pruneEvery = time.Hour

// PruneWorker deletes the deliveries created more than Retention ago.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	Store     *db.Store
	Retention time.Duration
	// now replaces time.Now in tests.
	now func() time.Time
}

// Timeout implements river.Worker: a backlog is deleted in batches, and
// what is left waits for the next run.
func (w *PruneWorker) Timeout(*river.Job[PruneArgs]) time.Duration { return 5 * time.Minute }

// Work implements river.Worker.
func (w *PruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	n, err := webhook.Prune(ctx, w.Store, now().Add(-w.Retention))
	if n > 0 {
		slog.Info("webhook deliveries past their retention deleted", "deliveries", n, "retention", w.Retention.String())
	}
	return err
}

// prunePeriodically is the retention job's schedule, when there is one.
func prunePeriodically() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(pruneEvery),
		func() (river.JobArgs, *river.InsertOpts) { return PruneArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
