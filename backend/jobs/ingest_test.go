package jobs

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/netguard"
)

// counting is the lexical embedder counting the texts it embeds; it fails
// every call once failing is set, and after stallAfter calls (when set) it
// hangs until its context ends: an attempt that runs out of time after a
// known number of batches, however slow the machine.
type counting struct {
	embed.Lexical
	texts      atomic.Int64
	calls      atomic.Int64
	stallAfter int64
	failing    atomic.Bool
	panicking  atomic.Bool
}

func (c *counting) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if c.panicking.Load() {
		panic("the embedder is broken")
	}
	if c.failing.Load() {
		return nil, errors.New("the embedding server is down")
	}
	if n := c.calls.Add(1); c.stallAfter > 0 && n > c.stallAfter {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c.texts.Add(int64(len(texts)))
	return c.Lexical.Embed(ctx, texts)
}

type fixture struct {
	store *db.Store
	org   uuid.UUID
	ds    uuid.UUID
	river *rivertest.Worker[IngestArgs, pgx.Tx]
}

// webPage is a fixture whose datasource is the web page at url, fetched
// through a guard that lets loopback (the test's server) in.
func webPage(t *testing.T, url string) fixture {
	t.Helper()
	w := &IngestWorker{}
	f := setup(t, "", w)
	w.K = knowledge.New(f.store, embed.Lexical{}, netguard.New(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}))
	require.NoError(t, f.store.TenantTx(context.Background(), f.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		_, err := tx.Exec(context.Background(), "UPDATE datasources SET type = 'web_page', config = $1 WHERE id = $2", []byte(`{"url":"`+url+`"}`), f.ds)
		return err
	}))
	return f
}

// setup makes an organization with a datastore holding one text datasource
// of content, and a River test worker running w.
func setup(t *testing.T, content string, w *IngestWorker) fixture {
	t.Helper()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	org, _, err := account.Bootstrap(ctx, store, "A", "pro")
	require.NoError(t, err)
	f := fixture{store: store, org: org, ds: uuid.New()}
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		ds := uuid.New()
		if _, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{OrgID: org, ID: ds, Name: "s", EmbeddingModel: embed.Lexical{}.Model(), EmbeddingDim: embed.LexicalDim}); err != nil {
			return err
		}
		_, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: org, ID: f.ds, DatastoreID: ds, Type: "text", Name: "t", Config: []byte("{}"), Content: []byte(content)})
		return err
	}))
	f.river = rivertest.NewWorker(t, riverpgxv5.New(pool), &river.Config{}, river.Worker[IngestArgs](w))
	return f
}

// work runs one attempt of the datasource's ingestion job, as River does,
// with maxAttempts attempts in all.
func (f fixture) work(t *testing.T, attempt, maxAttempts int) *rivertest.WorkResult {
	t.Helper()
	ctx := context.Background()
	tx, err := f.store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	args := IngestArgs{OrgID: f.org, DatasourceID: f.ds}
	job, err := river.NewClient(riverpgxv5.New(f.store.Pool), &river.Config{})
	require.NoError(t, err)
	res, err := job.InsertTx(ctx, tx, args, &river.InsertOpts{MaxAttempts: maxAttempts})
	require.NoError(t, err)
	// River counts an attempt when it starts one.
	_, err = tx.Exec(ctx, "UPDATE river_job SET attempt = $1 WHERE id = $2", attempt-1, res.Job.ID)
	require.NoError(t, err)
	res.Job.Attempt = attempt - 1
	// WorkJob also returns the job's own error: the result says what
	// River made of it.
	out, _ := f.river.WorkJob(ctx, t, tx, res.Job)
	require.NotNil(t, out)
	return out
}

func (f fixture) datasource(t *testing.T) dbq.GetDatasourceRow {
	t.Helper()
	var d dbq.GetDatasourceRow
	require.NoError(t, f.store.Tenant(context.Background(), f.org, func(q *dbq.Queries) (err error) {
		d, err = q.GetDatasource(context.Background(), dbq.GetDatasourceParams{OrgID: f.org, ID: f.ds})
		return err
	}))
	return d
}

// requireRetried checks that River will run the job again (at once after a
// first failure: "available", later with backoff: "retryable").
func requireRetried(t *testing.T, res *rivertest.WorkResult) {
	t.Helper()
	require.Contains(t, []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStateRetryable}, res.Job.State)
}

// chunks counts the datasource's stored chunks, visible or not.
func (f fixture) chunks(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	var n int
	require.NoError(t, pgx.BeginFunc(ctx, f.store.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.org.String()); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT count(*) FROM chunks WHERE datasource_id = $1", f.ds).Scan(&n)
	}))
	return n
}

func longText(paragraphs int) string {
	var b strings.Builder
	for i := range paragraphs {
		fmt.Fprintf(&b, "Paragraph %d tells of topic %d with enough words to fill part of a chunk of text for the test. ", i, i)
		b.WriteString("It goes on a little longer so that chunks hold several sentences each.\n\n")
	}
	return b.String()
}

// A document that cannot be read ends its job cancelled in River (not
// completed, not retried) and its datasource in error with the reason.
func TestPermanentFailureCancelsTheJob(t *testing.T) {
	t.Parallel()
	w := &IngestWorker{}
	f := setup(t, "   \n\n  ", w)
	w.K = knowledge.New(f.store, embed.Lexical{}, netguard.New(netguard.Config{}))

	res := f.work(t, 1, 5)
	require.Equal(t, river.EventKindJobCancelled, res.EventKind)
	require.Equal(t, rivertype.JobStateCancelled, res.Job.State)
	d := f.datasource(t)
	require.Equal(t, "error", d.Status)
	require.Contains(t, d.Error, "no text")
}

// A transient failure is retried; the last attempt records why it failed.
func TestLastAttemptRecordsTheFailure(t *testing.T) {
	t.Parallel()
	emb := &counting{}
	emb.failing.Store(true)
	w := &IngestWorker{}
	f := setup(t, longText(10), w)
	w.K = knowledge.New(f.store, emb, netguard.New(netguard.Config{}))

	res := f.work(t, 1, 2)
	require.Equal(t, river.EventKindJobFailed, res.EventKind)
	requireRetried(t, res)
	d := f.datasource(t)
	require.Equal(t, "pending", d.Status, "a failure that will be retried is not final")
	require.Equal(t, "attempt 1 of 2 failed (an error on our side); it will be retried", d.Error,
		"the error's own text (a provider's, a database's) is for the log")

	res = f.work(t, 2, 2)
	require.Equal(t, rivertype.JobStateDiscarded, res.Job.State)
	d = f.datasource(t)
	require.Equal(t, "error", d.Status)
	require.Equal(t, "ingestion failed after 2 attempts; it will not be retried", d.Error,
		"the error's own text (a provider's, a database's) is for the log")
}

// A page that fails for a reason that may pass (a 503) is retried, and the
// datasource says so with the site's answer, the organization's own URL's,
// between attempts and after the last one.
func TestRetriedFetchSaysWhy(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	f := webPage(t, srv.URL+`/faq`)
	host := strings.TrimPrefix(srv.URL, "http://")

	f.work(t, 1, 2)
	d := f.datasource(t)
	require.Equal(t, "pending", d.Status)
	require.Equal(t, "attempt 1 of 2 failed ("+host+" answered 503 Service Unavailable); it will be retried", d.Error)

	f.work(t, 2, 2)
	d = f.datasource(t)
	require.Equal(t, "error", d.Status)
	require.Equal(t, "ingestion failed after 2 attempts ("+host+" answered 503 Service Unavailable); it will not be retried", d.Error)
}

// A last attempt stopped by a graceful shutdown (its context cancelled, not
// past its deadline) leaves the datasource as it was, for the attempt River
// runs again, rather than failing it for good.
func TestLastAttemptStoppedByAShutdownIsNotAFailure(t *testing.T) {
	t.Parallel()
	w := &IngestWorker{}
	f := setup(t, longText(10), w)
	w.K = knowledge.New(f.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("stop initiated"))
	job := &river.Job[IngestArgs]{JobRow: &rivertype.JobRow{Attempt: 5, MaxAttempts: 5}, Args: IngestArgs{OrgID: f.org, DatasourceID: f.ds}}
	err := w.Work(ctx, job)
	require.ErrorIs(t, err, context.Canceled)
	d := f.datasource(t)
	require.NotEqual(t, "error", d.Status, d.Error)
	require.Empty(t, d.Error)
}

// A panic while ingesting records the datasource as failed and cancels the
// job, rather than leaving it running for good.
func TestPanicRecordsTheFailure(t *testing.T) {
	t.Parallel()
	emb := &counting{}
	emb.panicking.Store(true)
	w := &IngestWorker{}
	f := setup(t, longText(10), w)
	w.K = knowledge.New(f.store, emb, netguard.New(netguard.Config{}))

	res := f.work(t, 1, 5)
	require.Equal(t, river.EventKindJobCancelled, res.EventKind)
	require.Equal(t, rivertype.JobStateCancelled, res.Job.State)
	d := f.datasource(t)
	require.Equal(t, "error", d.Status)
	require.Equal(t, "ingestion failed on an internal error; it will not be retried", d.Error)
}

// Text with NUL bytes (which Postgres refuses in text) ingests without them.
func TestNULBytesAreDropped(t *testing.T) {
	t.Parallel()
	w := &IngestWorker{}
	f := setup(t, "Order a\x00b shipped.", w)
	w.K = knowledge.New(f.store, embed.Lexical{}, netguard.New(netguard.Config{}))

	res := f.work(t, 1, 5)
	require.Equal(t, rivertype.JobStateCompleted, res.Job.State)
	require.Equal(t, "synced", f.datasource(t).Status)
	ctx := context.Background()
	var text string
	require.NoError(t, pgx.BeginFunc(ctx, f.store.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.org.String()); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT text FROM chunks WHERE datasource_id = $1", f.ds).Scan(&text)
	}))
	require.Contains(t, text, "Order ab shipped.")
}

// An attempt cut by its timeout leaves what it embedded; the retry embeds
// only the rest. When the last attempt times out, the failure is recorded
// although the job's context is cancelled.
func TestTimedOutAttemptResumes(t *testing.T) {
	t.Parallel()
	text := longText(400)
	emb := &counting{stallAfter: 2}
	w := &IngestWorker{timeout: func(IngestArgs) time.Duration { return 2 * time.Second }}
	f := setup(t, text, w)
	w.K = knowledge.New(f.store, emb, netguard.New(netguard.Config{}))
	w.K.Chunking.MaxTokens = 64 // many chunks, so many batches
	total := len(knowledge.Chunk(knowledge.Markdown(text), w.K.Chunking))
	require.Greater(t, total, 4*64, "the document must need several batches")

	res := f.work(t, 1, 3)
	requireRetried(t, res)
	first := emb.texts.Load()
	require.Positive(t, first, "the first attempt wrote no batch")
	require.Less(t, first, int64(total), "the first attempt was not cut short")
	require.Equal(t, "pending", f.datasource(t).Status, "waiting for its next attempt")
	written := f.chunks(t)
	require.Positive(t, written, "the first attempt committed no batch")

	// Whole batches, at most the two embedded before the stall: on a
	// loaded machine the 2 s timeout may cut the second one's write (CI
	// once saw one batch).
	require.Zero(t, written%64, "only whole batches of 64 are written, got %d", written)
	require.LessOrEqual(t, written, 2*64, "no batch was written after the stall")
	w.timeout = nil // the real, size-based timeout
	emb.stallAfter = 0
	res = f.work(t, 2, 3)
	require.Equal(t, rivertype.JobStateCompleted, res.Job.State)
	d := f.datasource(t)
	require.Equal(t, "synced", d.Status)
	require.EqualValues(t, total, d.ChunkCount)
	require.Equal(t, int64(total-written), emb.texts.Load()-first, "the retry embedded again what the first attempt had written")

	// A resync whose only attempt times out says so.
	require.NoError(t, f.store.Tenant(context.Background(), f.org, func(q *dbq.Queries) error {
		return q.SetDatasourceStatus(context.Background(), dbq.SetDatasourceStatusParams{OrgID: f.org, ID: f.ds, Status: "pending"})
	}))
	w.timeout = func(IngestArgs) time.Duration { return 200 * time.Millisecond }
	emb.calls.Store(0)
	emb.stallAfter = 1
	res = f.work(t, 1, 1)
	require.Equal(t, rivertype.JobStateDiscarded, res.Job.State)
	d = f.datasource(t)
	require.Equal(t, "error", d.Status)
	require.Contains(t, d.Error, "took longer than its 200ms")
}

// The timeout grows with the document: River's default minute is only the
// floor's neighbourhood, and a 20 MiB document gets well over the time the
// slowest embedder needs for it.
func TestIngestTimeoutGrows(t *testing.T) {
	t.Parallel()
	small := knowledge.IngestTimeout(10<<10, 0)
	large := knowledge.IngestTimeout(knowledge.MaxFileBytes, 0)
	require.GreaterOrEqual(t, small, time.Minute)
	// ~17,000 chunks of ~1.2 kB at the neural embedder's ~40 chunks/s: ~7 min.
	require.Greater(t, large, 20*time.Minute)
	require.Greater(t, knowledge.IngestTimeout(0, 1000), knowledge.IngestTimeout(0, 50), "a site of more pages gets longer")
	w := &IngestWorker{}
	require.Equal(t, large, w.Timeout(&river.Job[IngestArgs]{Args: IngestArgs{SizeBytes: knowledge.MaxFileBytes}}))
}

// An organization's ingestions run in the order they were queued, PerOrg
// at once: a job with PerOrg of its organization's jobs ahead of it (one
// running on any instance, here) waits, snoozed (no attempt counted, its
// datasource still pending), while another organization's job runs.
func TestIngestionWorkersAreShared(t *testing.T) {
	t.Parallel()
	w := &IngestWorker{PerOrg: 1}
	f := setup(t, "The shop opens at nine.", w)
	w.K = knowledge.New(f.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	w.Pool = f.store.Pool
	ctx := context.Background()

	// A crawl of the same organization, queued earlier, running.
	c, err := river.NewClient(riverpgxv5.New(f.store.Pool), &river.Config{})
	require.NoError(t, err)
	other, err := c.Insert(ctx, IngestArgs{OrgID: f.org, DatasourceID: uuid.New(), MaxPages: 1000}, nil)
	require.NoError(t, err)
	_, err = f.store.Pool.Exec(ctx, "UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1", other.Job.ID)
	require.NoError(t, err)

	res := f.work(t, 1, 5)
	require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
	require.Equal(t, "pending", f.datasource(t).Status, "a waiting job's datasource is pending")

	// The running job is another organization's: this one runs.
	_, err = f.store.Pool.Exec(ctx, `UPDATE river_job SET args = jsonb_set(args, '{org_id}', to_jsonb($1::text)) WHERE id = $2`, uuid.NewString(), other.Job.ID)
	require.NoError(t, err)
	res = f.work(t, 1, 5)
	require.Equal(t, river.EventKindJobCompleted, res.EventKind)
	require.Equal(t, "synced", f.datasource(t).Status)
}

// A reader's error may quote the file: encoding/xml's names the invalid
// XML name it read, raw bytes and all (here one of 1 MiB that is not
// UTF-8). The failure is recorded as text Postgres takes, bounded: it was
// refused, and the datasource stayed running for good.
func TestUnstorableFailureIsRecorded(t *testing.T) {
	t.Parallel()
	var docx bytes.Buffer
	zw := zip.NewWriter(&docx)
	part, err := zw.Create("word/document.xml")
	require.NoError(t, err)
	_, err = part.Write([]byte("<w:document><\xff\x00" + strings.Repeat("a", 1<<20) + "/></w:document>"))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	w := &IngestWorker{}
	f := setup(t, "", w)
	w.K = knowledge.New(f.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	require.NoError(t, f.store.TenantTx(context.Background(), f.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		_, err := tx.Exec(context.Background(), "UPDATE datasources SET type = 'file', config = $1, content = $2 WHERE id = $3",
			[]byte(`{"fileName":"bad.docx"}`), docx.Bytes(), f.ds)
		return err
	}))

	res := f.work(t, 1, 5)
	require.Equal(t, rivertype.JobStateCancelled, res.Job.State)
	d := f.datasource(t)
	require.Equal(t, "error", d.Status, "the failure was not recorded")
	require.Contains(t, d.Error, "bad.docx: not a readable DOCX")
	require.True(t, utf8.ValidString(d.Error))
	require.LessOrEqual(t, len(d.Error), 4<<10)
}

// A page without a title is named by its path, decoded: one of an old
// site's Latin-1 names (%E9) ingests (every attempt failed on its title,
// which Postgres refused, and so did the crawl of any site linking to it).
func TestPageNamedByAnUndecodablePath(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("The café opens at nine."))
	}))
	defer srv.Close()
	f := webPage(t, srv.URL+`/caf%E9%00`)

	res := f.work(t, 1, 5)
	require.Equal(t, rivertype.JobStateCompleted, res.Job.State)
	d := f.datasource(t)
	require.Equal(t, "synced", d.Status, d.Error)
	require.EqualValues(t, 1, d.ChunkCount)
}

// A site's status line is the site's to word, bytes Postgres refuses in
// text included: the retry and the last attempt's failure are recorded
// all the same (the datasource stayed running for good).
func TestUnstorableStatusLineIsRecorded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 503 Busy\xff\x00now\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		_ = buf.Flush()
	}))
	defer srv.Close()
	f := webPage(t, srv.URL+`/faq`)

	f.work(t, 1, 2)
	d := f.datasource(t)
	require.Equal(t, "pending", d.Status)
	require.Contains(t, d.Error, "answered 503 Busy\uFFFDnow); it will be retried")

	f.work(t, 2, 2)
	d = f.datasource(t)
	require.Equal(t, "error", d.Status)
	require.Contains(t, d.Error, "answered 503 Busy\uFFFDnow); it will not be retried")
}

// A job of a datasource for which a newer job was queued since (a resync
// while it waited for its retry) neither runs nor records its outcome:
// the newer job's is the datasource's. Recorded, the older job's last
// failure turned a datasource the newer job had just synced into an error
// (and sent datasource.failed), and its retries set it pending again.
func TestOlderJobDoesNotOverwriteANewerOnesOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	emb := &counting{}
	w := &IngestWorker{}
	f := setup(t, longText(10), w)
	w.Pool = f.store.Pool
	w.K = knowledge.New(f.store, emb, netguard.New(netguard.Config{}))

	rc, err := river.NewClient(riverpgxv5.New(f.store.Pool), &river.Config{})
	require.NoError(t, err)
	args := IngestArgs{OrgID: f.org, DatasourceID: f.ds}
	old, err := rc.Insert(ctx, args, nil)
	require.NoError(t, err)
	// The resync's job, which ran and synced the datasource.
	_, err = rc.Insert(ctx, args, nil)
	require.NoError(t, err)
	require.NoError(t, w.K.Ingest(ctx, f.org, f.ds))
	require.Equal(t, "synced", f.datasource(t).Status)
	embedded := emb.texts.Load()

	// The older job's retries, the embedder failing now.
	emb.failing.Store(true)
	job := &river.Job[IngestArgs]{JobRow: old.Job, Args: args}
	job.Attempt, job.MaxAttempts = 4, 5
	_ = w.Work(ctx, job)
	d := f.datasource(t)
	require.Equal(t, "synced", d.Status, d.Error)
	job.Attempt = 5
	_ = w.Work(ctx, job)
	d = f.datasource(t)
	require.Equal(t, "synced", d.Status, d.Error)
	require.Empty(t, d.Error)

	// Nor, the embedder back, does it embed the datasource again.
	emb.failing.Store(false)
	require.NoError(t, w.Work(ctx, job))
	require.Equal(t, embedded, emb.texts.Load(), "the older job embedded the datasource again")
}
