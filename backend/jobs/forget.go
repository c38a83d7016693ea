package jobs

import (
	"context"
	"encoding/binary"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/parleyhq/parley/backend/knowledge"
)

// ForgetArgs is the job that takes deleted datasources' text out of the
// answers of their organization that cited them, and out of the webhook
// deliveries that carried those answers (knowledge.ForgetCited),
// enqueued by their deletion. AfterMessage limits it to the messages of
// greater ids (the late pass, see Client.EnqueueForget); zero: all.
type ForgetArgs struct {
	OrgID         uuid.UUID   `json:"org_id"`
	DatasourceIDs []uuid.UUID `json:"datasource_ids"`
	AfterMessage  uuid.UUID   `json:"after_message"`
}

// Kind implements river.JobArgs.
func (ForgetArgs) Kind() string { return "forget_cited_text" }

// InsertOpts: retried with River's backoff; a retry walks the messages
// again and changes only what the failed attempt left.
func (ForgetArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 10} }

// DefaultLateAnswers is Config.LateAnswers when not given.
const DefaultLateAnswers = 10 * time.Minute

// ForgetWorker runs ForgetArgs jobs.
type ForgetWorker struct {
	river.WorkerDefaults[ForgetArgs]
	K *knowledge.Knowledge
}

// Timeout implements river.Worker: the walk is in short transactions of a
// few thousand messages; an organization of millions takes minutes.
func (w *ForgetWorker) Timeout(*river.Job[ForgetArgs]) time.Duration { return 30 * time.Minute }

// Work implements river.Worker.
func (w *ForgetWorker) Work(ctx context.Context, job *river.Job[ForgetArgs]) error {
	n, err := w.K.ForgetCited(ctx, job.Args.OrgID, job.Args.DatasourceIDs, job.Args.AfterMessage)
	if n > 0 {
		slog.InfoContext(ctx, "deleted datasources' text taken out of the answers and webhook deliveries that cited them",
			"org", job.Args.OrgID, "datasources", len(job.Args.DatasourceIDs), "changed", n)
	}
	return err
}

// forgetArgs are the two jobs of one deletion: one now, over all the
// organization's messages, and a late pass after late, over the messages
// stored since shortly before now. A chat turn that read the passages
// before the deletion stores its answer, citing them, when it ends, which
// may be after the first pass: the late pass comes after the longest turn
// (late), and reads only the answers stored since (their ids are UUIDv7s,
// made when stored; a minute earlier than now allows for other instances'
// clocks).
func forgetArgs(job knowledge.ForgetJob, now time.Time, late time.Duration) []river.InsertManyParams {
	return []river.InsertManyParams{
		{Args: ForgetArgs{OrgID: job.OrgID, DatasourceIDs: job.DatasourceIDs}},
		{
			Args:       ForgetArgs{OrgID: job.OrgID, DatasourceIDs: job.DatasourceIDs, AfterMessage: v7Floor(now.Add(-time.Minute))},
			InsertOpts: &river.InsertOpts{ScheduledAt: now.Add(late)},
		},
	}
}

// v7Floor is a uuid below every UUIDv7 made at t or later: their first 48
// bits are their time in milliseconds, and Postgres orders uuids by their
// bytes.
func v7Floor(t time.Time) uuid.UUID {
	var u uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(max(t.UnixMilli(), 0)))
	copy(u[:6], ms[2:])
	return u
}
