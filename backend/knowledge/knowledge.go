// Package knowledge turns documents into searchable chunks and searches
// them: extraction of text from files and web pages, chunking, ingestion
// (embedding with the datastore's embedder, backend/embed) and hybrid
// (vector + full-text) search over pgvector. Its jobs run in backend/jobs.
//
// It must never read or return another organization's chunks: every query
// runs in the caller's tenant transaction and filters by org_id.
package knowledge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/netguard"
	"github.com/parleyhq/parley/backend/webhook"
)

// Knowledge ingests and searches datastores.
type Knowledge struct {
	Store *db.Store
	// Default embeds new datastores; the others are those older datastores
	// may name.
	Default   embed.Embedder
	embedders map[string]embed.Embedder
	Guard     *netguard.Client
	Chunking  ChunkOptions
	// EfSearch is the HNSW search breadth (hnsw.ef_search): more finds more
	// of the true nearest chunks and costs time. Measured (docs/benchmarks.md)
	// with the neural embedder on 18,830 English sentences: 80 gives
	// recall@10 0.988 in 3.4 ms, 200 gives 0.997 in 6.0 ms.
	EfSearch int
	// ExactBelow, ExactMax and ExactRatio choose how the vector half ranks
	// a search's scope (its datastores, or the datasources asked): exactly,
	// every distance computed, when it holds at most ExactBelow chunks, or
	// at most ExactMax with the square of its chunk count at most
	// ExactRatio times the rows of the HNSW index; else through the index.
	// The index holds every organization's chunks, so a scope is a filter
	// over it: the graph walk grows with the multiple of the scope the
	// index holds (and misses neighbours, and past pgvector's
	// hnsw.max_scan_tuples returns fewer than asked), the exact scan with
	// the scope (docs/benchmarks.md, "Exact or HNSW").
	ExactBelow int64
	ExactMax   int64
	ExactRatio float64
	// SiteBytes bounds the text a web_site's crawl keeps (CrawlBytes
	// unless set): the crawl stops before the page that would pass it.
	SiteBytes int
	// batch is how many chunks are embedded (and written) at a time.
	batch int
	// forgetBatch is how many messages one transaction of ForgetCited
	// reads (forgetBatchRows unless a test sets fewer).
	forgetBatch int
	// goneEvery is how often a run reading its content (a site's crawl,
	// a page's fetch, a file's extraction) checks that its datasource
	// still exists (whileExists).
	goneEvery time.Duration
	// Hooks sends datasource.synced and datasource.failed to the
	// organization's webhooks, in the transaction that records the outcome.
	Hooks *webhook.Emitter
}

// DefaultEfSearch is the HNSW search breadth unless configured.
const DefaultEfSearch = 200

// DefaultExactBelow is the search scope always ranked exactly, in chunks,
// however small the index: 4,000 took 18–25 ms at 100,000 chunks, the
// scope's rows in runs or scattered (docs/benchmarks.md), so 2,000 about
// 10 ms.
const DefaultExactBelow = 2_000

// DefaultExactRatio and DefaultExactMax: at 40 candidates the exact scan
// cost 4–6 µs a chunk of the scope, the filtered HNSW walk 33, 57 and
// 120 ms at multiples of 10, 25 and 100 (100,000 and 1,000,000 chunks,
// docs/benchmarks.md); they cross near scope² = 500 × index at both sizes.
// The walk grows slower than that beyond (about as multiple^0.56), so the
// square would send ever larger scopes to the exact scan: ExactMax stops
// it at 25,000 chunks, about 100–125 ms.
const (
	DefaultExactRatio = 500
	DefaultExactMax   = 25_000
)

// New returns a Knowledge embedding new datastores with def.
func New(store *db.Store, def embed.Embedder, guard *netguard.Client, others ...embed.Embedder) *Knowledge {
	k := &Knowledge{Store: store, Default: def, Guard: guard, Chunking: DefaultChunkOptions, batch: 64, EfSearch: DefaultEfSearch, ExactBelow: DefaultExactBelow, ExactMax: DefaultExactMax, ExactRatio: DefaultExactRatio,
		SiteBytes: CrawlBytes, goneEvery: 5 * time.Second, embedders: map[string]embed.Embedder{def.Model(): def}}
	for _, e := range others {
		k.embedders[e.Model()] = e
	}
	return k
}

// Embedder returns the embedder a datastore was made with.
func (k *Knowledge) Embedder(model string) (embed.Embedder, error) {
	if e, ok := k.embedders[model]; ok {
		return e, nil
	}
	return nil, fmt.Errorf("the embedding model %q of this datastore is not configured", model)
}

// Permanent reports whether err is a failure that retrying cannot fix (an
// unreadable document, a page that is gone), and the reason for the user.
func Permanent(err error) (string, bool) {
	var perm *permanentError
	if errors.As(err, &perm) {
		return perm.msg, true
	}
	return "", false
}

// permanentError is a failure that retrying cannot fix; msg is for the user.
type permanentError struct{ msg string }

func (e *permanentError) Error() string { return e.msg }

func permanent(format string, args ...any) error {
	return &permanentError{msg: fmt.Sprintf(format, args...)}
}

// maxErrorBytes bounds a datasource's error, which every page of its
// datastore's datasources returns: a reader's message may quote the file
// (an XML name of megabytes).
const maxErrorBytes = 4 << 10

// errorText is msg as a datasource's error can hold it: without NUL or
// bytes that are not UTF-8, which a reader's message may quote from the
// file and a site's status line may hold, and which Postgres refuses in
// text (the failure went unrecorded, the datasource running for good),
// and at most maxErrorBytes.
func errorText(msg string) string {
	msg = cleanText(msg)
	if len(msg) > maxErrorBytes {
		msg = clip(msg, maxErrorBytes-len("…")) + "…"
	}
	return msg
}

// Fail records that a datasource's ingestion failed, for msg. It runs even
// when ctx is cancelled (a job that timed out must still say so).
func (k *Knowledge) Fail(ctx context.Context, org, id uuid.UUID, msg string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	msg = errorText(msg)
	err := k.Store.TenantTx(ctx, org, func(tx pgx.Tx, q *dbq.Queries) error {
		if err := q.SetDatasourceStatus(ctx, dbq.SetDatasourceStatusParams{OrgID: org, ID: id, Status: "error", Error: msg}); err != nil {
			return err
		}
		return k.emit(ctx, tx, q, org, id, webhook.DatasourceFailed)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Deleted meanwhile: there is nothing left to mark.
		slog.InfoContext(ctx, "ingestion failed for a datasource since deleted", "datasource", id)
	case err != nil:
		slog.ErrorContext(ctx, "recording an ingestion failure", "datasource", id, "err", err)
	}
}

// FailStalled records, as Fail does (datasource.failed included), that a
// datasource's ingestion stopped without recording its outcome, if the
// datasource is still pending or running as it was when seen (its
// updated_at): a sync since, which queued a new job, changed it. It
// reports whether it did.
func (k *Knowledge) FailStalled(ctx context.Context, org, id uuid.UUID, seen time.Time, msg string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var failed bool
	err := k.Store.TenantTx(ctx, org, func(tx pgx.Tx, q *dbq.Queries) error {
		n, err := q.FailStalledDatasource(ctx, dbq.FailStalledDatasourceParams{OrgID: org, ID: id, Seen: seen, Error: errorText(msg)})
		if err != nil || n == 0 {
			return err
		}
		failed = true
		return k.emit(ctx, tx, q, org, id, webhook.DatasourceFailed)
	})
	return failed && err == nil, err
}

// IngestTimeoutOf is IngestTimeout for a datasource of sizeBytes and
// config, as its ingestion job was sized.
func IngestTimeoutOf(sizeBytes int64, config []byte) time.Duration {
	return IngestTimeout(sizeBytes, configOf(config).MaxPages)
}

// Retrying records that an attempt at ingesting a datasource failed and
// another will follow: the datasource is pending again, and its error says
// why when the failure is the site's (netguard.Reason: a 503, a timeout),
// which is the organization's own URL; any other reason (the database, an
// embedding provider) is for the log only.
func (k *Knowledge) Retrying(ctx context.Context, org, id uuid.UUID, attempt, of int, err error) {
	reason := "an error on our side"
	if r, ok := netguard.Reason(err); ok {
		reason = r
	} else if errors.Is(err, context.DeadlineExceeded) {
		reason = "it ran out of time; the next resumes where it stopped"
	}
	msg := errorText(fmt.Sprintf("attempt %d of %d failed (%s); it will be retried", attempt, of, reason))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		return q.SetDatasourceStatus(ctx, dbq.SetDatasourceStatusParams{OrgID: org, ID: id, Status: "pending", Error: msg})
	})
	if err != nil {
		slog.WarnContext(ctx, "recording an ingestion's retry", "datasource", id, "err", err)
	}
}

// Throughput floors the ingestion timeout is sized with: the slowest
// configuration measured (the neural embedder on two cores, some 40 chunks
// of ~1.2 kB a second, docs/benchmarks.md) with a margin of four.
const (
	timeoutBase      = 2 * time.Minute
	timeoutPerByte   = time.Second / (12 << 10) // ~10 chunks/s
	timeoutPerPage   = 30 * time.Second         // a fetch is capped at 20 s by the guard
	defaultPageCount = 1
)

// IngestTimeout is how long one attempt at ingesting a datasource may take:
// it grows with the document (sizeBytes) or the pages to fetch (maxPages of
// a web site). An attempt that runs out resumes where it stopped on retry.
func IngestTimeout(sizeBytes int64, maxPages int) time.Duration {
	pages := max(maxPages, defaultPageCount)
	return timeoutBase + time.Duration(sizeBytes)*timeoutPerByte + time.Duration(pages)*timeoutPerPage
}

// errGone ends a run whose datasource was deleted, or taken over by a newer
// run (another embedder, other content): there is nothing left for it to do.
var errGone = errors.New("datasource deleted or re-ingested meanwhile")

// Ingest turns a datasource into chunks. A run writes its chunks as the
// next generation (invisible to search) in batches that each commit, then
// in one transaction makes them the visible ones and deletes the previous
// generation: a run killed half-way leaves nothing half-visible.
//
// Batches are checkpoints: a run records a fingerprint of what it writes
// (the embedder and every chunk), and a retry with the same fingerprint
// embeds only the chunks no earlier attempt wrote. Runs of the same content
// at once (a resync while one runs) share the work, since a chunk's place is
// unique; a run of other content or another embedder supersedes an older
// one, which then stops.
//
// Every transaction that touches chunks first locks the datasource's row,
// the order in which deleting a datasource takes them, so that deletion and
// ingestion never deadlock; a datasource deleted meanwhile ends the run
// without error.
func (k *Knowledge) Ingest(ctx context.Context, org, id uuid.UUID) error {
	var src dbq.GetDatasourceContentRow
	err := k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		var err error
		if src, err = q.GetDatasourceContent(ctx, dbq.GetDatasourceContentParams{OrgID: org, ID: id}); err != nil {
			return err
		}
		return q.SetDatasourceStatus(ctx, dbq.SetDatasourceStatusParams{OrgID: org, ID: id, Status: "running"})
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // deleted meanwhile: nothing to do
	}
	if err != nil {
		return err
	}
	emb, err := k.Embedder(src.EmbeddingModel)
	if err != nil {
		return permanent("%v", err)
	}
	rctx, stop := k.whileExists(ctx, org, id)
	docs, err := k.documents(rctx, src)
	stop()
	if errors.Is(context.Cause(rctx), errGone) {
		return nil // deleted while its content was read: nothing to do
	}
	if err != nil {
		return err
	}
	var pieces []Piece
	var owners []Document
	for _, d := range docs {
		d = composed(d)
		for _, p := range Chunk(d, k.Chunking) {
			pieces = append(pieces, p)
			owners = append(owners, d)
		}
	}
	if len(pieces) == 0 {
		return permanent("the document holds no text")
	}
	if err := k.withinQuota(ctx, org, id, len(pieces)); err != nil {
		if errors.Is(err, errGone) {
			return nil
		}
		return err
	}
	r := run{k: k, org: org, id: id, model: emb.Model(), fingerprint: fingerprint(emb, pieces, owners)}
	err = r.start(ctx)
	if err == nil {
		err = r.write(ctx, src.DatastoreID, emb, pieces, owners)
	}
	if err == nil {
		err = r.publish(ctx, len(pieces))
	}
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}

// Quota reads how many chunks the organization's plan lets it hold
// (plans.knowledge_chunks) and how many its datasources hold, but those of
// datasource except (nil: all).
func Quota(ctx context.Context, q *dbq.Queries, org uuid.UUID, except *uuid.UUID) (allowed, held int64, err error) {
	r, err := q.KnowledgeQuota(ctx, dbq.KnowledgeQuotaParams{OrgID: org, ExceptID: except})
	return r.KnowledgeChunks, r.Held, err
}

// withinQuota refuses, as a permanent failure recorded on the datasource,
// a document of n chunks that would take its organization past its plan's
// quota; the datasource's own chunks, which the run replaces, do not
// count. It is checked before anything is embedded, so that a document
// too large costs nothing; ingestions of one organization running at once
// may each pass it, and publish checks again, exactly.
func (k *Knowledge) withinQuota(ctx context.Context, org, id uuid.UUID, n int) error {
	var allowed, held int64
	err := k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		var err error
		allowed, held, err = Quota(ctx, q, org, &id)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		// The organization was deleted while the content was read, its
		// datasources with it: nothing to do, rather than an error that
		// retries the job only for it to find the datasource gone.
		return errGone
	}
	if err != nil {
		return err
	}
	return overQuota(n, held, allowed)
}

// overQuota is the permanent failure of a document of n chunks where the
// organization's other datasources hold held of the allowed; nil if it fits.
func overQuota(n int, held, allowed int64) error {
	if held+int64(n) > allowed {
		return permanent("the document makes %d chunks, and the organization's datastores hold %d of the %d its plan allows: delete datasources, or move to a higher plan", n, held, allowed)
	}
	return nil
}

// whileExists returns a context that ends, with errGone for its cause,
// once datasource id is found deleted: it is looked up every goneEvery
// while the run reads the content. A site's crawl may take many minutes,
// and a datasource deleted meanwhile would otherwise have its pages
// fetched to the end for nothing. stop ends the watch.
func (k *Knowledge) whileExists(ctx context.Context, org, id uuid.UUID) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(k.goneEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
				_, err := q.GetDatasource(ctx, dbq.GetDatasourceParams{OrgID: org, ID: id})
				return err
			})
			if errors.Is(err, pgx.ErrNoRows) {
				cancel(errGone)
				return
			}
			// Any other failure (the database away for a moment) is
			// not a deletion: the next tick asks again.
		}
	}()
	return ctx, func() {
		close(done)
		cancel(nil)
	}
}

// run is one ingestion run of a datasource.
type run struct {
	k           *Knowledge
	org, id     uuid.UUID
	fingerprint string
	// model is the embedder the run embeds with, the datastore's when the
	// run read its content: once the datastore names another, the run is
	// superseded (the change queued a run with the new one).
	model   string
	gen     int32          // the generation it writes
	written map[int32]bool // places earlier attempts wrote
}

// locked runs fn in a tenant transaction holding the datasource's row, if
// the datasource still exists and this run still owns its next generation.
func (r *run) locked(ctx context.Context, fn func(q *dbq.Queries, row dbq.LockDatasourceRow) error) error {
	return r.lockedTx(ctx, func(_ pgx.Tx, q *dbq.Queries, row dbq.LockDatasourceRow) error { return fn(q, row) })
}

// lockedTx is locked with the transaction, for work that commits with it
// (webhook events).
func (r *run) lockedTx(ctx context.Context, fn func(tx pgx.Tx, q *dbq.Queries, row dbq.LockDatasourceRow) error) error {
	return r.k.Store.TenantTx(ctx, r.org, func(tx pgx.Tx, q *dbq.Queries) error {
		row, err := q.LockDatasource(ctx, dbq.LockDatasourceParams{OrgID: r.org, ID: r.id})
		if errors.Is(err, pgx.ErrNoRows) {
			return errGone
		}
		if err != nil {
			return err
		}
		return fn(tx, q, row)
	})
}

// emit sends event for datasource id, as the API returns it then.
func (k *Knowledge) emit(ctx context.Context, tx pgx.Tx, q *dbq.Queries, org, id uuid.UUID, event string) error {
	return k.Hooks.Emit(ctx, tx, org, event, func() (proto.Message, error) {
		r, err := q.GetDatasource(ctx, dbq.GetDatasourceParams{OrgID: org, ID: id})
		if err != nil {
			return nil, err
		}
		return datasourceProto(r), nil
	})
}

// start begins the run, or resumes it where an earlier attempt stopped.
func (r *run) start(ctx context.Context) error {
	return r.locked(ctx, func(q *dbq.Queries, row dbq.LockDatasourceRow) error {
		if row.EmbeddingModel != r.model {
			return errGone // the datastore's embedder changed while the content was read
		}
		r.gen = row.Generation + 1
		r.written = map[int32]bool{}
		if row.IngestFingerprint == r.fingerprint {
			done, err := q.WrittenPositions(ctx, dbq.WrittenPositionsParams{OrgID: r.org, DatasourceID: r.id, Generation: r.gen})
			if err != nil {
				return err
			}
			for _, p := range done {
				r.written[p] = true
			}
		} else if err := q.DeleteChunksAbove(ctx, dbq.DeleteChunksAboveParams{OrgID: r.org, DatasourceID: r.id, Generation: row.Generation}); err != nil {
			return err
		}
		return q.StartIngestRun(ctx, dbq.StartIngestRunParams{OrgID: r.org, ID: r.id, Fingerprint: r.fingerprint})
	})
}

// owned is true while the datasource's row still names this run, and its
// datastore the run's embedder.
func (r *run) owned(row dbq.LockDatasourceRow) bool {
	return row.IngestFingerprint == r.fingerprint && row.Generation+1 == r.gen && row.EmbeddingModel == r.model
}

// write embeds and stores the pieces no earlier attempt wrote, a batch at a
// time; each batch commits on its own (a checkpoint).
func (r *run) write(ctx context.Context, datastore uuid.UUID, emb embed.Embedder, pieces []Piece, owners []Document) error {
	var todo []int
	for i := range pieces {
		if !r.written[int32(i)] {
			todo = append(todo, i)
		}
	}
	for start := 0; start < len(todo); start += r.k.batch {
		batch := todo[start:min(start+r.k.batch, len(todo))]
		texts := make([]string, 0, len(batch))
		for _, i := range batch {
			texts = append(texts, EmbedText(owners[i].Title, pieces[i].Heading, pieces[i].Text))
		}
		vecs, err := emb.Embed(ctx, texts)
		if err != nil {
			return fmt.Errorf("embedding: %w", err)
		}
		rows := make([]chunkRow, 0, len(batch))
		for j, i := range batch {
			cid, err := uuid.NewV7()
			if err != nil {
				return err
			}
			p, d := pieces[i], owners[i]
			vec := pgvector.NewVector(vecs[j])
			rows = append(rows, chunkRow{
				OrgID: r.org, ID: cid, DatastoreID: datastore, DatasourceID: r.id, Generation: r.gen,
				Position: int32(i), Text: p.Text, Title: d.Title, Heading: p.Heading, Url: d.URL,
				Page: int32(p.Page), Tokens: int32(p.Tokens), Embedding: &vec,
				EmbeddingDim: int32(emb.Dimension()),
			})
		}
		err = r.locked(ctx, func(q *dbq.Queries, row dbq.LockDatasourceRow) error {
			if !r.owned(row) {
				return errGone
			}
			return writeChunks(ctx, q, rows)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// publish makes the run's chunks the visible ones and drops the previous
// generation, in one transaction.
//
// It checks the quota again, holding the organization's quota lock until it
// commits: two ingestions of one organization that each passed withinQuota
// before embedding would otherwise both publish, past the quota. The one
// that no longer fits deletes what it wrote and fails for good.
func (r *run) publish(ctx context.Context, count int) error {
	var over error
	err := r.lockedTx(ctx, func(tx pgx.Tx, q *dbq.Queries, row dbq.LockDatasourceRow) error {
		if !r.owned(row) {
			return errGone // published by a concurrent run of the same content, or superseded
		}
		if err := q.LockKnowledgeQuota(ctx, r.org); err != nil {
			return err
		}
		allowed, held, err := Quota(ctx, q, r.org, &r.id)
		if err != nil {
			return err
		}
		if over = overQuota(count, held, allowed); over != nil {
			return q.DeleteChunksAbove(ctx, dbq.DeleteChunksAboveParams{OrgID: r.org, DatasourceID: r.id, Generation: row.Generation})
		}
		n, err := q.CountChunks(ctx, dbq.CountChunksParams{OrgID: r.org, DatasourceID: r.id, Generation: r.gen})
		if err != nil {
			return err
		}
		if n != int64(count) {
			return fmt.Errorf("run %d of datasource %s holds %d chunks of %d", r.gen, r.id, n, count)
		}
		if err := q.PublishGeneration(ctx, dbq.PublishGenerationParams{OrgID: r.org, DatasourceID: r.id, Generation: r.gen}); err != nil {
			return err
		}
		if err := q.DeleteChunksBelow(ctx, dbq.DeleteChunksBelowParams{OrgID: r.org, DatasourceID: r.id, Generation: r.gen}); err != nil {
			return err
		}
		if err := q.MarkSynced(ctx, dbq.MarkSyncedParams{OrgID: r.org, ID: r.id, Generation: r.gen, ChunkCount: int32(count), EmbeddingModel: r.model}); err != nil {
			return err
		}
		return r.k.emit(ctx, tx, q, r.org, r.id, webhook.DatasourceSynced)
	})
	if err == nil {
		err = over
	}
	return err
}

// fingerprint identifies what a run writes: the embedder and every chunk.
func fingerprint(emb embed.Embedder, pieces []Piece, owners []Document) string {
	h := sha256.New()
	// "context": chunks are embedded with their title and heading (EmbedText).
	fmt.Fprintf(h, "context\x00%s\x00%d\x00%d\x00", emb.Model(), emb.Dimension(), len(pieces))
	for i, p := range pieces {
		d := owners[i]
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00%d\x00%s\x00%s\x00%d\x00", i, p.Text, p.Heading, p.Page, d.Title, d.URL, p.Tokens)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// documents reads a datasource's content into documents.
func (k *Knowledge) documents(ctx context.Context, src dbq.GetDatasourceContentRow) ([]Document, error) {
	cfg := configOf(src.Config)
	switch src.Type {
	case "text":
		d := Clean(Markdown(string(src.Content)))
		if d.Title == "" {
			d.Title = src.Name
		}
		return []Document{d}, nil
	case "qa":
		return []Document{Clean(Document{Title: src.Name, URL: cfg.SourceURL, Sections: []Section{{
			Heading: cfg.Question, Text: "Question: " + cfg.Question + "\nAnswer: " + cfg.Answer,
		}}})}, nil
	case "file":
		d, _, err := Extract(ctx, cfg.FileName, src.Content, "")
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			return nil, permanent("%s: %v", cfg.FileName, err)
		}
		return []Document{d}, nil
	case "web_page":
		d, err := k.fetch(ctx, cfg.URL)
		if err != nil {
			return nil, err
		}
		return []Document{d}, nil
	case "web_site":
		return k.crawl(ctx, cfg.URL, cfg.MaxPages)
	}
	return nil, permanent("unknown datasource type %q", src.Type)
}

// fetch reads one web page through the guard.
func (k *Knowledge) fetch(ctx context.Context, raw string) (Document, error) {
	p, err := k.Guard.Get(ctx, raw)
	if err != nil {
		if ctx.Err() != nil || temporary(err) {
			// The job's context ended (not the page's fault), or the
			// failure may pass (a 5xx, a 429, a timeout, a cut
			// connection): the ingest worker retries.
			return Document{}, fmt.Errorf("fetching %s: %w", raw, err)
		}
		// The site's answer, as for a crawl's pages (temporary): a 404 or
		// 410, a refused destination, a page too large. Retrying a
		// refused connection or an unknown host within minutes rarely
		// helps either: say so now.
		var dnsErr *net.DNSError
		if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return Document{}, permanent("fetching %s: the site is unreachable (%v)", raw, err)
		}
		return Document{}, permanent("%s: %v", raw, err)
	}
	name := p.URL.Path
	if strings.HasSuffix(name, "/") || name == "" {
		name += "index.html"
	}
	d, _, err := Extract(ctx, name, p.Body, p.URL.String())
	if ctx.Err() != nil {
		return Document{}, ctx.Err()
	}
	if err != nil {
		return Document{}, permanent("%s: %v", raw, err)
	}
	d.URL = p.URL.String()
	return d, nil
}

// validURL checks a user-given URL at creation, before any job runs: what
// the guard will refuse to fetch whatever the name resolves to (a private
// or loopback address, localhost) is refused now, as http_request's
// endpoints and webhooks are, not left to fail in the job.
func (k *Knowledge) validURL(ctx context.Context, raw string) error {
	if k.Guard != nil {
		return k.Guard.CheckDestination(ctx, raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	return netguard.CheckURL(u)
}

// AgentDatastores returns the datastores attached to an agent of org.
func (k *Knowledge) AgentDatastores(ctx context.Context, q *dbq.Queries, org, agent uuid.UUID) ([]dbq.Datastore, error) {
	rows, err := q.AgentDatastoreRows(ctx, dbq.AgentDatastoreRowsParams{OrgID: org, AgentID: agent})
	stores := make([]dbq.Datastore, len(rows))
	for i, r := range rows {
		stores[i] = r.Datastore
	}
	return stores, err
}

// Passages turns results into the model's knowledge.
func Passages(rs []Result) []llm.Passage {
	out := make([]llm.Passage, 0, len(rs))
	for _, r := range rs {
		out = append(out, llm.Passage{
			Source: r.Source(), Title: r.Title, URL: r.URL, DatasourceID: r.DatasourceID.String(),
			DatasourceName: r.DatasourceName, Text: r.Text, Score: r.Score, Similarity: r.Similarity,
		})
	}
	return out
}

// chunkRow is one chunk as writeChunks stores it.
type chunkRow struct {
	OrgID, ID, DatastoreID, DatasourceID uuid.UUID
	Generation, Position                 int32
	Text, Title, Heading, Url            string
	Page, Tokens                         int32
	Embedding                            *pgvector.Vector
	EmbeddingDim                         int32
}

// writeChunks inserts rows, one statement for each run of rows of the same
// datasource, generation and dimension (a run's batch is one).
func writeChunks(ctx context.Context, q *dbq.Queries, rows []chunkRow) error {
	for len(rows) > 0 {
		f := rows[0]
		p := dbq.InsertChunksParams{OrgID: f.OrgID, DatastoreID: f.DatastoreID, DatasourceID: f.DatasourceID, Generation: f.Generation, EmbeddingDim: f.EmbeddingDim}
		n := 0
		for _, r := range rows {
			if r.OrgID != f.OrgID || r.DatastoreID != f.DatastoreID || r.DatasourceID != f.DatasourceID || r.Generation != f.Generation || r.EmbeddingDim != f.EmbeddingDim {
				break
			}
			p.Ids = append(p.Ids, r.ID)
			p.Positions = append(p.Positions, r.Position)
			p.Texts = append(p.Texts, r.Text)
			p.Titles = append(p.Titles, r.Title)
			p.Headings = append(p.Headings, r.Heading)
			p.Urls = append(p.Urls, r.Url)
			p.Pages = append(p.Pages, r.Page)
			p.Tokens = append(p.Tokens, r.Tokens)
			p.Embeddings = append(p.Embeddings, r.Embedding)
			n++
		}
		if err := q.InsertChunks(ctx, p); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}
