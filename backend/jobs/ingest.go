package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/parleyhq/parley/backend/knowledge"
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
		if r := recover(); r != nil {
			slog.ErrorContext(ctx, "ingestion panicked", "datasource", id, "panic", r, "stack", string(debug.Stack()))
			w.K.Fail(ctx, org, id, "ingestion failed on an internal error; it will not be retried")
			err = river.JobCancel(fmt.Errorf("ingestion panicked: %v", r))
		}
	}()
	err = w.K.Ingest(ctx, org, id)
	if err == nil {
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
	if job.Attempt >= job.MaxAttempts && !stopped {
		slog.ErrorContext(ctx, "ingestion failed", "datasource", id, "attempt", job.Attempt, "err", err)
		reason := "; it will not be retried"
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
