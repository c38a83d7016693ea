package knowledge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
	"github.com/riverqueue/river"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/netguard"
)

// Knowledge ingests and searches datastores.
type Knowledge struct {
	Store *db.Store
	// Default embeds new datastores; the others are those older datastores
	// may name.
	Default   Embedder
	embedders map[string]Embedder
	Guard     *netguard.Client
	Chunking  ChunkOptions
	// EfSearch is the HNSW search breadth (hnsw.ef_search): more finds more
	// of the true nearest chunks and costs time. Measured (docs/benchmarks.md)
	// with the neural embedder on 18,830 English sentences: 80 gives
	// recall@10 0.988 in 3.4 ms, 200 gives 0.997 in 6.0 ms.
	EfSearch int
	// batch is how many chunks are embedded (and written) at a time.
	batch int
}

// DefaultEfSearch is the HNSW search breadth unless configured.
const DefaultEfSearch = 200

// New returns a Knowledge embedding new datastores with def.
func New(store *db.Store, def Embedder, guard *netguard.Client, others ...Embedder) *Knowledge {
	k := &Knowledge{Store: store, Default: def, Guard: guard, Chunking: DefaultChunkOptions, batch: 64, EfSearch: DefaultEfSearch,
		embedders: map[string]Embedder{def.Model(): def}}
	for _, e := range others {
		k.embedders[e.Model()] = e
	}
	return k
}

// Embedder returns the embedder a datastore was made with.
func (k *Knowledge) Embedder(model string) (Embedder, error) {
	if e, ok := k.embedders[model]; ok {
		return e, nil
	}
	return nil, fmt.Errorf("the embedding model %q of this datastore is not configured", model)
}

// IngestArgs is the job that ingests one datasource.
type IngestArgs struct {
	OrgID        uuid.UUID `json:"org_id"`
	DatasourceID uuid.UUID `json:"datasource_id"`
}

// Kind implements river.JobArgs.
func (IngestArgs) Kind() string { return "ingest_datasource" }

// InsertOpts: a few retries with River's backoff.
func (IngestArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 5} }

// IngestWorker runs ingestion jobs.
type IngestWorker struct {
	river.WorkerDefaults[IngestArgs]
	K *Knowledge
}

// Work implements river.Worker.
func (w *IngestWorker) Work(ctx context.Context, job *river.Job[IngestArgs]) error {
	err := w.K.Ingest(ctx, job.Args.OrgID, job.Args.DatasourceID)
	var perm *permanentError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &perm):
		// A document that cannot be read will not be readable on retry.
		w.K.fail(ctx, job.Args.OrgID, job.Args.DatasourceID, perm.msg)
		return nil
	case job.Attempt >= job.MaxAttempts:
		w.K.fail(ctx, job.Args.OrgID, job.Args.DatasourceID, "ingestion failed after retries: "+err.Error())
	}
	return err
}

// permanentError is a failure that retrying cannot fix; msg is for the user.
type permanentError struct{ msg string }

func (e *permanentError) Error() string { return e.msg }

func permanent(format string, args ...any) error {
	return &permanentError{msg: fmt.Sprintf(format, args...)}
}

func (k *Knowledge) fail(ctx context.Context, org, id uuid.UUID, msg string) {
	err := k.Store.Tenant(context.WithoutCancel(ctx), org, func(q *dbq.Queries) error {
		return q.SetDatasourceStatus(ctx, dbq.SetDatasourceStatusParams{OrgID: org, ID: id, Status: "error", Error: msg})
	})
	if err != nil {
		slog.ErrorContext(ctx, "recording an ingestion failure", "datasource", id, "err", err)
	}
}

// Ingest turns a datasource into chunks. It is idempotent: it first removes
// what an interrupted run left, writes its chunks as the next generation
// (invisible to search), then in one transaction makes them the visible
// ones and deletes the previous generation. A run killed half-way leaves no
// duplicate and nothing half-visible.
func (k *Knowledge) Ingest(ctx context.Context, org, id uuid.UUID) error {
	var src dbq.GetDatasourceContentRow
	err := k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		var err error
		if src, err = q.GetDatasourceContent(ctx, dbq.GetDatasourceContentParams{OrgID: org, ID: id}); err != nil {
			return err
		}
		if err := q.SetDatasourceStatus(ctx, dbq.SetDatasourceStatusParams{OrgID: org, ID: id, Status: "running"}); err != nil {
			return err
		}
		return q.DeleteChunksAbove(ctx, dbq.DeleteChunksAboveParams{OrgID: org, DatasourceID: id, Generation: src.Generation})
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
	docs, err := k.documents(ctx, src)
	if err != nil {
		return err
	}
	gen := src.Generation + 1
	var pieces []Piece
	var owners []Document
	for _, d := range docs {
		for _, p := range Chunk(d, k.Chunking) {
			pieces = append(pieces, p)
			owners = append(owners, d)
		}
	}
	if len(pieces) == 0 {
		return permanent("the document holds no text")
	}
	for start := 0; start < len(pieces); start += k.batch {
		end := min(start+k.batch, len(pieces))
		texts := make([]string, 0, end-start)
		for _, p := range pieces[start:end] {
			texts = append(texts, p.Text)
		}
		vecs, err := emb.Embed(ctx, texts)
		if err != nil {
			return fmt.Errorf("embedding: %w", err)
		}
		rows := make([]dbq.InsertChunksParams, 0, len(texts))
		for i, p := range pieces[start:end] {
			cid, err := uuid.NewV7()
			if err != nil {
				return err
			}
			d := owners[start+i]
			vec := pgvector.NewVector(vecs[i])
			rows = append(rows, dbq.InsertChunksParams{
				OrgID: org, ID: cid, DatastoreID: src.DatastoreID, DatasourceID: id, Generation: gen,
				Position: int32(start + i), Text: p.Text, Title: d.Title, Heading: p.Heading, Url: d.URL,
				Page: int32(p.Page), Tokens: int32(p.Tokens), Embedding: &vec,
				EmbeddingDim: int32(emb.Dimension()),
			})
		}
		// Each batch commits on its own: a long document is not one huge
		// transaction, and what a killed run wrote stays invisible.
		err = k.Store.Tenant(ctx, org, func(q *dbq.Queries) error { return writeChunks(ctx, q, rows) })
		if err != nil {
			return err
		}
	}
	return k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		if err := q.PublishGeneration(ctx, dbq.PublishGenerationParams{OrgID: org, DatasourceID: id, Generation: gen}); err != nil {
			return err
		}
		if err := q.DeleteChunksBelow(ctx, dbq.DeleteChunksBelowParams{OrgID: org, DatasourceID: id, Generation: gen}); err != nil {
			return err
		}
		return q.MarkSynced(ctx, dbq.MarkSyncedParams{OrgID: org, ID: id, Generation: gen, ChunkCount: int32(len(pieces))})
	})
}

// documents reads a datasource's content into documents.
func (k *Knowledge) documents(ctx context.Context, src dbq.GetDatasourceContentRow) ([]Document, error) {
	cfg := configOf(src.Config)
	switch src.Type {
	case "text":
		d := Markdown(string(src.Content))
		if d.Title == "" {
			d.Title = src.Name
		}
		return []Document{d}, nil
	case "qa":
		return []Document{{Title: src.Name, URL: cfg.SourceURL, Sections: []Section{{
			Heading: cfg.Question, Text: "Question: " + cfg.Question + "\nAnswer: " + cfg.Answer,
		}}}}, nil
	case "file":
		d, _, err := Extract(cfg.FileName, src.Content, "")
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
		var dnsErr *net.DNSError
		switch {
		case netguard.Blocked(err):
			return Document{}, permanent("%s: %v", raw, err)
		case errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			// Retrying a refused connection or an unknown host within
			// minutes rarely helps: say so now.
			return Document{}, permanent("fetching %s: the site is unreachable (%v)", raw, err)
		}
		return Document{}, fmt.Errorf("fetching %s: %w", raw, err)
	}
	name := p.URL.Path
	if strings.HasSuffix(name, "/") || name == "" {
		name += "index.html"
	}
	d, _, err := Extract(name, p.Body, p.URL.String())
	if err != nil {
		return Document{}, permanent("%s: %v", raw, err)
	}
	d.URL = p.URL.String()
	return d, nil
}

// validURL checks a user-given URL at creation, before any job runs.
func validURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	return netguard.CheckURL(u)
}

// AgentDatastores returns the datastores attached to an agent of org.
func (k *Knowledge) AgentDatastores(ctx context.Context, q *dbq.Queries, org, agent uuid.UUID) ([]dbq.Datastore, error) {
	ids, err := q.AgentDatastores(ctx, dbq.AgentDatastoresParams{OrgID: org, AgentID: agent})
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	stores := make([]dbq.Datastore, 0, len(ids))
	for _, id := range ids {
		d, err := q.GetDatastore(ctx, dbq.GetDatastoreParams{OrgID: org, ID: id})
		if err != nil {
			return nil, err
		}
		stores = append(stores, d)
	}
	return stores, nil
}

// ForAgent returns the passages an agent's datastores hold for a question.
func (k *Knowledge) ForAgent(ctx context.Context, q *dbq.Queries, org, agent uuid.UUID, datasourceIDs []uuid.UUID, question string, topK int) ([]Result, error) {
	stores, err := k.AgentDatastores(ctx, q, org, agent)
	if err != nil || len(stores) == 0 {
		return nil, err
	}
	return k.Search(ctx, q, org, stores, datasourceIDs, question, topK)
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

// writeChunks inserts rows as one pipelined batch and returns its first
// error.
func writeChunks(ctx context.Context, q *dbq.Queries, rows []dbq.InsertChunksParams) error {
	var first error
	q.InsertChunks(ctx, rows).Exec(func(_ int, err error) {
		if err != nil && first == nil {
			first = err
		}
	})
	return first
}
