package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/parleyhq/parley/backend/knowledge"
)

// StalledArgs is the periodic job that fails the datasources whose
// ingestion was lost with its process on its last attempt (StalledWorker).
type StalledArgs struct{}

// Kind implements river.JobArgs.
func (StalledArgs) Kind() string { return "ingest_stalled" }

// InsertOpts: on the default queue, one try (the next period is the
// retry), and at most one waiting or running at a time.
func (StalledArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByPeriod: stalledEvery}}
}

// stalledEvery is how often the job runs (and at each start of River's
// leader); stalledBatch is how many datasources one run fails at most,
// the rest waiting for the next.
const (
	stalledEvery = 5 * time.Minute
	stalledBatch = 100
)

// stalledMessage is a lost ingestion's error.
const stalledMessage = "the ingestion stopped: the process running it was lost on its last attempt (out of memory?); sync again"

// StalledWorker fails the datasources pending or running that no
// ingestion job will finish: a process killed during a job's last attempt
// (out of memory on a huge document, a node lost) recorded nothing, and
// River's rescuer discards such a job, so the datasource stayed running
// for good. A datasource is lost when it is unchanged for longer than its
// job's attempt may take (IngestWorker.Timeout) and no job of River's may
// still run it (available, scheduled, retryable, running: a crashed
// attempt stays running until the rescuer comes). Every process that runs
// jobs has it, so that the job is never lost on one without K.
type StalledWorker struct {
	river.WorkerDefaults[StalledArgs]
	K *knowledge.Knowledge
	// now replaces time.Now in tests.
	now func() time.Time
}

// Timeout implements river.Worker.
func (w *StalledWorker) Timeout(*river.Job[StalledArgs]) time.Duration { return 2 * time.Minute }

// Work implements river.Worker.
func (w *StalledWorker) Work(ctx context.Context, _ *river.Job[StalledArgs]) error {
	if w.K == nil {
		return nil
	}
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	at := now()
	lost, err := stalledIngestions(ctx, w.K, at.Add(-knowledge.IngestTimeout(0, 0)), stalledBatch)
	if err != nil {
		return err
	}
	n := 0
	for _, s := range lost {
		if at.Sub(s.updated) <= knowledge.IngestTimeoutOf(s.size, s.config) {
			continue // its last attempt may still be running
		}
		failed, err := w.K.FailStalled(ctx, s.org, s.id, s.updated, stalledMessage)
		if err != nil {
			slog.ErrorContext(ctx, "recording a lost ingestion's failure", "datasource", s.id, "err", err)
			continue
		}
		if failed {
			n++
			slog.WarnContext(ctx, "ingestion lost with its process: datasource failed", "org", s.org, "datasource", s.id)
		}
	}
	if n > 0 {
		slog.Info("lost ingestions recorded as failed", "datasources", n)
	}
	return ctx.Err()
}

// stalledIngestion is a datasource pending or running that no job runs.
type stalledIngestion struct {
	org, id uuid.UUID
	size    int64
	config  []byte
	updated time.Time
}

// stalledIngestions lists, oldest first and at most limit, the
// datasources of every organization pending or running unchanged since
// before that no live ingestion job names. A datasource's every new run
// is queued in the transaction that makes it pending, so one read sees
// either its job or no run to come.
func stalledIngestions(ctx context.Context, k *knowledge.Knowledge, before time.Time, limit int) ([]stalledIngestion, error) {
	var out []stalledIngestion
	err := k.Store.StalledIngestions(ctx, before, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT d.org_id, d.id, d.size_bytes, d.config, d.updated_at FROM datasources d
			WHERE d.status IN ('pending', 'running') AND d.updated_at < $1
			  AND NOT EXISTS (SELECT 1 FROM river_job j
			    WHERE j.kind = $2 AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled')
			      AND j.args @> jsonb_build_object('org_id', d.org_id, 'datasource_id', d.id))
			ORDER BY d.updated_at LIMIT $3`, before, IngestArgs{}.Kind(), limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (s stalledIngestion, err error) {
			err = r.Scan(&s.org, &s.id, &s.size, &s.config, &s.updated)
			return s, err
		})
		return err
	})
	return out, err
}

// stalledPeriodically is the job's schedule.
func stalledPeriodically() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(stalledEvery),
		func() (river.JobArgs, *river.InsertOpts) { return StalledArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
