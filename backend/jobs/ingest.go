package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/netguard"
)

// IngestArgs is the job that ingests one datasource. SizeBytes and
// MaxPages size its timeout.
type IngestArgs struct {
	OrgID        uuid.UUID `json:"org_id"`
	DatasourceID uuid.UUID `json:"datasource_id"`
	SizeBytes    int64     `json:"size_bytes,omitempty"`
	MaxPages     int       `json:"max_pages,omitempty"`
}

// Kind implements river.JobArgs. (The name predates this package: queued
// jobs of older versions still run.)
func (IngestArgs) Kind() string { return "ingest_datasource" }

// InsertOpts: a few retries with River's backoff; each resumes where the
// previous attempt stopped.
func (IngestArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 5} }

// IngestWorker runs ingestion jobs.
type IngestWorker struct {
	river.WorkerDefaults[IngestArgs]
	K *knowledge.Knowledge
	// Pool reads River's jobs, and PerOrg is how many of one
	// organization's ingestions may run at once across the deployment
	// (fairShare); 0 leaves them unbounded.
	Pool   *pgxpool.Pool
	PerOrg int
	// timeout sizes an attempt; knowledge.IngestTimeout unless a test
	// shortens it.
	timeout func(IngestArgs) time.Duration
}

// Timeout implements river.Worker: it grows with the document, where
// River's default (one minute) cut every document of more than some 2,400
// chunks, on every attempt.
func (w *IngestWorker) Timeout(job *river.Job[IngestArgs]) time.Duration {
	if w.timeout != nil {
		return w.timeout(job.Args)
	}
	return knowledge.IngestTimeout(job.Args.SizeBytes, job.Args.MaxPages)
}

// Work implements river.Worker. A permanent failure (unsupported content, a
// page that is gone) is recorded and the job cancelled, not retried; any
// other error is retried, and recorded when the last attempt fails, with a
// generic reason (its detail, a database's or a provider's message, is for
// the log, not for the API and the webhook). A panic is recorded and the
// job cancelled: River would recover it and retry, leaving the datasource
// running for good after the last attempt.
func (w *IngestWorker) Work(ctx context.Context, job *river.Job[IngestArgs]) (err error) {
	org, id := job.Args.OrgID, job.Args.DatasourceID
	defer func() {
		if err != nil {
			err = recordable{err}
		}
	}()
	if w.superseded(ctx, job) {
		return nil // a newer job runs the datasource, or ran it
	}
	if wait := w.fairShare(ctx, job); wait > 0 {
		return river.JobSnooze(wait)
	}
	defer func() {
		if r := recover(); r != nil {
			slog.ErrorContext(ctx, "ingestion panicked", "datasource", id, "panic", r, "stack", string(debug.Stack()))
			if !w.superseded(ctx, job) {
				w.K.Fail(ctx, org, id, "ingestion failed on an internal error; it will not be retried")
			}
			err = river.JobCancel(fmt.Errorf("ingestion panicked: %v", r))
		}
	}()
	err = w.K.Ingest(ctx, org, id)
	if err == nil {
		return nil
	}
	if w.superseded(ctx, job) {
		// A resync or an embedder switch queued a newer job while this
		// one ran: its outcome is the datasource's. Recorded, this one's
		// failure overwrote it (a datasource synced by the newer job
		// read as failed, or pending for a retry that is pointless).
		slog.InfoContext(ctx, "ingestion failed, superseded by a newer job", "datasource", id, "err", err)
		return nil
	}
	if msg, ok := knowledge.Permanent(err); ok {
		w.K.Fail(ctx, org, id, msg)
		return river.JobCancel(err)
	}
	// A job stopped by its client (a graceful shutdown) is not failed: River
	// makes it available again without counting the attempt, its last
	// included. Only its own timeout (a deadline) counts against it.
	stopped := errors.Is(ctx.Err(), context.Canceled)
	if job.Attempt < job.MaxAttempts && !stopped {
		w.K.Retrying(ctx, org, id, job.Attempt, job.MaxAttempts, err)
	}
	if job.Attempt >= job.MaxAttempts && !stopped {
		slog.ErrorContext(ctx, "ingestion failed", "datasource", id, "attempt", job.Attempt, "err", err)
		reason := "; it will not be retried"
		if r, ok := netguard.Reason(err); ok {
			reason = " (" + r + "); it will not be retried"
		}
		if ctx.Err() != nil {
			limit := w.Timeout(job)
			if limit >= time.Second {
				limit = limit.Round(time.Second)
			}
			reason = ": each attempt took longer than its " + limit.String()
		}
		attempts := "1 attempt"
		if job.Attempt > 1 {
			attempts = strconv.Itoa(job.Attempt) + " attempts"
		}
		w.K.Fail(ctx, org, id, "ingestion failed after "+attempts+reason)
	}
	return err
}

// superseded reports whether a newer ingestion job of the same datasource
// was queued after job: a resync, or a switch of its datastore's
// embedder, queues one in the transaction that makes the datasource
// pending, and that job reads the content (and the embedder) as they are
// now. job then has nothing left to do or to record: run, it embedded the
// whole datasource again after the newer one published it (a retry in its
// backoff while the resync ran); its failure, recorded, overwrote the
// newer job's outcome. A failed read says no: the job runs as before. It
// reads even when ctx has ended (a last attempt out of time).
func (w *IngestWorker) superseded(ctx context.Context, job *river.Job[IngestArgs]) bool {
	if w.Pool == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var newer bool
	err := w.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_job
		WHERE kind = $1 AND id > $2 AND args @> jsonb_build_object('org_id', $3::text, 'datasource_id', $4::text))`,
		IngestArgs{}.Kind(), job.ID, job.Args.OrgID.String(), job.Args.DatasourceID.String()).Scan(&newer)
	if err != nil {
		slog.WarnContext(ctx, "ingestion: looking for a newer job of the datasource", "datasource", job.Args.DatasourceID, "err", err)
		return false
	}
	return newer
}

// recordable is a job's error as River can record it: its text goes into
// a jsonb column, which refuses NUL ("\u0000"), and a site's status line or
// a reader's error quoting a file may hold one. Unrecordable, the attempt
// could not be completed: the job stayed running until River's rescuer
// came, holding its organization's share of the workers meanwhile.
type recordable struct{ error }

func (e recordable) Error() string { return strings.ReplaceAll(e.error.Error(), "\x00", "") }
func (e recordable) Unwrap() error { return e.error }

// fairWait is how long the next job in an organization's line waits
// before it asks again; those behind it wait longer, up to fairWaitMax.
const (
	fairWait    = time.Second
	fairWaitMax = 30 * time.Second
)

// fairShare is how long job must wait for its turn among its
// organization's ingestions, or 0 to run now. An organization's ingestions
// run in the order they were queued, PerOrg at most at once (counted in
// River's table, every instance's): a job runs when fewer than PerOrg of
// its organization's jobs queued before it are running or waiting to
// (a retry in its backoff does not hold the line). Without it, one
// organization's crawls of slow sites (up to hours each) held every
// worker, and every other organization's documents waited behind them.
// The oldest job of an organization always runs, so its line moves. A
// waiting job keeps its attempts (River counts no snooze), and its
// datasource stays pending. A failed count lets the job run.
func (w *IngestWorker) fairShare(ctx context.Context, job *river.Job[IngestArgs]) time.Duration {
	if w.PerOrg <= 0 || w.Pool == nil {
		return 0
	}
	var ahead int
	err := w.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job
		WHERE kind = $1 AND args->>'org_id' = $2 AND id < $3 AND state IN ('running', 'available', 'scheduled')`,
		IngestArgs{}.Kind(), job.Args.OrgID.String(), job.ID).Scan(&ahead)
	if err != nil {
		slog.WarnContext(ctx, "ingestion: counting the organization's jobs ahead", "err", err)
		return 0
	}
	if ahead < w.PerOrg {
		return 0
	}
	slog.InfoContext(ctx, "ingestion waits for its organization's earlier ones", "datasource", job.Args.DatasourceID, "ahead", ahead)
	return min(time.Duration(ahead-w.PerOrg+1)*fairWait, fairWaitMax)
}
