package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/webhook"
)

// Client enqueues jobs and, when built with workers, runs them.
type Client struct {
	river   *river.Client[pgx.Tx]
	workers bool
	late    time.Duration
}

var (
	_ knowledge.Enqueuer = (*Client)(nil)
	_ webhook.Enqueuer   = (*Client)(nil)
)

// Config says what a Client runs.
type Config struct {
	// Workers runs jobs in this process; without it the client only enqueues.
	Workers bool
	// MaxWorkers is how many jobs run at once (default 4).
	MaxWorkers int
	Logger     *slog.Logger
	// Webhooks sends webhook deliveries; without it their jobs wait for a
	// process that has one.
	Webhooks *webhook.Deliverer
	// WebhookRetention, when positive, deletes every hour the deliveries
	// created longer ago than it (PruneWorker), through Store; the
	// process River elects leader schedules the job with its own.
	WebhookRetention time.Duration
	Store            *db.Store
	// LateAnswers is how long after a datasource's deletion a chat turn
	// that read its passages before may still store an answer citing
	// them: the late pass of the job that forgets them comes then
	// (forgetArgs). 0: DefaultLateAnswers.
	LateAnswers time.Duration
}

// rescueAfter is how long a job must have been running for River's rescuer
// to take it for lost (at least its kind's timeout).
const rescueAfter = 2 * time.Minute

// New returns a client over pool running k's jobs when cfg.Workers.
func New(pool *pgxpool.Pool, k *knowledge.Knowledge, cfg Config) (*Client, error) {
	rc := &river.Config{
		Logger: cfg.Logger, Middleware: []rivertype.Middleware{&observer{}},
		// A process fetches only the kinds it has workers for: one without
		// Webhooks (a worker started without --secrets-key) fetched every
		// delivery and failed it with River's unknown-kind error, spending
		// its attempts (on River's back-off, not webhook.Schedule) until
		// River discarded it, the delivery pending for good and never sent
		// though a process with the key ran. Left available, it waits for
		// one that has the worker.
		FetchOnlyKnownKinds: true,
		// A job whose process died (killed, out of memory, a node lost)
		// stays running until River's rescuer retries or discards it,
		// which it does past this or the job's timeout, whichever is
		// longer. River's default, an hour, held every webhook delivery
		// in flight at a crash (20 s each at most) an hour; the
		// others' timeouts are longer anyway.
		RescueStuckJobsAfter: rescueAfter,
	}
	if cfg.Workers {
		n := cfg.MaxWorkers
		if n <= 0 {
			n = 4
		}
		workers := river.NewWorkers()
		// One organization's ingestions take at most half the workers.
		river.AddWorker(workers, &IngestWorker{K: k, Pool: pool, PerOrg: max(1, n/2)})
		river.AddWorker(workers, &ForgetWorker{K: k})
		// Datasources whose ingestion was lost with its process, failed
		// (StalledWorker); the leader schedules it.
		river.AddWorker(workers, &StalledWorker{K: k})
		rc.PeriodicJobs = []*river.PeriodicJob{stalledPeriodically()}
		// One organization's deliveries take at most half of one
		// instance's delivery workers. Without Webhooks the worker is
		// still known, for River's rescuer (which runs on the leader, any
		// process): a delivery left running by a process that died is
		// then retried, where a kind without a worker is discarded, the
		// delivery pending for good. Such a process runs no deliveries'
		// queue, so it never fetches one.
		river.AddWorker(workers, &DeliverWorker{D: cfg.Webhooks, Pool: pool, PerOrg: 2 * n})
		if cfg.Store != nil {
			river.AddWorker(workers, &PruneWorker{Store: cfg.Store})
			if cfg.WebhookRetention > 0 {
				rc.PeriodicJobs = append(rc.PeriodicJobs, prunePeriodically(cfg.WebhookRetention))
			}
		}
		rc.Workers = workers
		// Deliveries wait on other people's servers (10 s at most each):
		// their own queue, wider, so that neither kind holds up the other.
		rc.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: n}}
		if cfg.Webhooks != nil {
			rc.Queues[QueueWebhooks] = river.QueueConfig{MaxWorkers: 4 * n}
		}
	}
	rv, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, err
	}
	late := cfg.LateAnswers
	if late <= 0 {
		late = DefaultLateAnswers
	}
	return &Client{river: rv, workers: cfg.Workers, late: late}, nil
}

// EnqueueIngest implements knowledge.Enqueuer.
func (c *Client) EnqueueIngest(ctx context.Context, tx pgx.Tx, job knowledge.IngestJob) error {
	_, err := c.river.InsertTx(ctx, tx, IngestArgs{
		OrgID: job.OrgID, DatasourceID: job.DatasourceID, SizeBytes: job.SizeBytes, MaxPages: job.MaxPages,
	}, nil)
	return err
}

// EnqueueForget implements knowledge.Enqueuer: the job now, and its late
// pass (forgetArgs).
func (c *Client) EnqueueForget(ctx context.Context, tx pgx.Tx, job knowledge.ForgetJob) error {
	_, err := c.river.InsertManyTx(ctx, tx, forgetArgs(job, time.Now(), c.late))
	return err
}

// EnqueueDelivery implements webhook.Enqueuer.
func (c *Client) EnqueueDelivery(ctx context.Context, tx pgx.Tx, org, delivery uuid.UUID) error {
	_, err := c.river.InsertTx(ctx, tx, DeliverArgs{OrgID: org, DeliveryID: delivery}, nil)
	return err
}

// Run runs jobs until ctx ends, then stops within grace: it takes no new job
// at once, lets those in flight finish until drain (at most grace), then
// cancels them and waits for them until grace ends. River makes a job
// cancelled this way available again without counting the attempt (an
// ingestion resumes where it stopped). A database out of reach delays the
// start until it answers (start). Without workers it only waits for ctx.
func (c *Client) Run(ctx context.Context, drain, grace time.Duration) error {
	if !c.workers {
		<-ctx.Done()
		return nil
	}
	if !c.start(ctx) {
		return nil // stopped before the jobs could start
	}
	<-ctx.Done()
	// One deadline for the whole stop, so that a process exits within its
	// grace (and its orchestrator's) rather than after the two of them.
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	dctx, cancelDrain := context.WithTimeout(sctx, min(drain, grace))
	defer cancelDrain()
	err := c.river.Stop(dctx)
	if errors.Is(err, context.DeadlineExceeded) {
		if err = c.river.StopAndCancel(sctx); err != nil {
			return fmt.Errorf("jobs still running after %s: %w", grace, err)
		}
	}
	return err
}

// startRetry is the first wait before River's start is tried again, and
// startRetryMax the longest.
const (
	startRetry    = 250 * time.Millisecond
	startRetryMax = 30 * time.Second
)

// start starts River, again and again with back-off until it starts or
// ctx ends (false). River's start reads the database (its queues, its
// producers); a database out of reach at that moment (a failover as the
// process starts) failed it, and a serving instance then ran no job until
// it was restarted, saying so only when it stopped.
func (c *Client) start(ctx context.Context) bool {
	wait := startRetry
	for {
		err := c.river.Start(context.WithoutCancel(ctx))
		if err == nil {
			return true
		}
		slog.Warn("jobs: cannot start; trying again", "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, startRetryMax)
	}
}

// River is the underlying client, for tests that inspect jobs.
func (c *Client) River() *river.Client[pgx.Tx] { return c.river }
