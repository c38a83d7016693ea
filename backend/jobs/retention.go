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
// the retention period (webhook.Prune). The retention travels with the
// job, as River's leader (the process that schedules it) was configured,
// so that whichever worker runs it prunes alike.
type PruneArgs struct {
	Retention time.Duration `json:"retention"`
}

// Kind implements river.JobArgs.
func (PruneArgs) Kind() string { return "webhook_retention" }

// InsertOpts: on the default queue, which every process running jobs
// runs (one without a Deliverer runs no deliveries' queue, New), one try
// (the next period is the retry), and at most one waiting or running at a
// time.
func (PruneArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByPeriod: pruneEvery}}
}

// pruneEvery is how often the retention job runs (and at each start of
// River's leader).
const pruneEvery = time.Hour

// PruneWorker deletes the deliveries created more than the job's
// Retention ago. Every process that runs jobs has it, so that the job is
// never lost on a worker configured without retention.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	Store *db.Store
	// now replaces time.Now in tests.
	now func() time.Time
}

// Timeout implements river.Worker: a backlog is deleted in batches, and
// what is left waits for the next run.
func (w *PruneWorker) Timeout(*river.Job[PruneArgs]) time.Duration { return 5 * time.Minute }

// Work implements river.Worker.
func (w *PruneWorker) Work(ctx context.Context, job *river.Job[PruneArgs]) error {
	keep := job.Args.Retention
	if keep <= 0 {
		return nil // kept for ever: nothing to delete
	}
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	n, err := webhook.Prune(ctx, w.Store, now().Add(-keep))
	if n > 0 {
		slog.Info("webhook deliveries past their retention deleted", "deliveries", n, "retention", keep.String())
	}
	return err
}

// prunePeriodically is the retention job's schedule for a retention of
// keep.
func prunePeriodically(keep time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(pruneEvery),
		func() (river.JobArgs, *river.InsertOpts) { return PruneArgs{Retention: keep}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
