package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/parleyhq/parley/backend/metrics"
	"github.com/parleyhq/parley/backend/telemetry"
)

// observer times every job attempt, by kind and outcome, for metrics, and
// gives each its span when tracing is on.
type observer struct{ river.MiddlewareDefaults }

var _ rivertype.WorkerMiddleware = &observer{}

// Work implements rivertype.WorkerMiddleware.
func (*observer) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	start := time.Now()
	ctx, span := telemetry.StartJob(ctx, job.Kind, job.ID, job.Attempt)
	err := doInner(ctx)
	outcome, failure := "ok", err
	var cancel *river.JobCancelError
	var snooze *river.JobSnoozeError
	switch {
	case errors.As(err, &snooze):
		// Put back to wait (its organization's fair share, a shutdown):
		// no attempt failed, nor is one spent.
		outcome, failure = "snoozed", nil
	case errors.As(err, &cancel):
		outcome = "cancelled"
	case err != nil:
		outcome = "error"
	}
	telemetry.EndJob(span, failure)
	metrics.Job(job.Kind, outcome, time.Since(start))
	return err
}

// QueueCounter counts the jobs in pool's River table by state, for
// metrics.NewQueueCollector. It uses River's own query, so that it follows
// River's schema.
func QueueCounter(pool *pgxpool.Pool) func(context.Context) (map[string]int, error) {
	exec := riverpgxv5.New(pool).GetExecutor()
	return func(ctx context.Context) (map[string]int, error) {
		byState, err := exec.JobCountByAllStates(ctx, &riverdriver.JobCountByAllStatesParams{})
		if err != nil {
			return nil, err
		}
		out := make(map[string]int, len(byState))
		for s, n := range byState {
			out[string(s)] = n
		}
		return out, nil
	}
}
