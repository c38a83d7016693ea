package knowledge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// dying fails every embedding call after the first `ok` ones: a worker
// killed half-way through a document.
type dying struct {
	embed.Lexical
	ok    int64
	calls atomic.Int64
}

func (d *dying) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if d.calls.Add(1) > d.ok {
		return nil, errors.New("killed")
	}
	return d.Lexical.Embed(ctx, texts)
}

type kenv struct {
	store  *db.Store
	org    uuid.UUID
	ds     uuid.UUID
	store_ uuid.UUID // the datastore
}

func setupIngest(t *testing.T, text string) kenv { return setupIngestTB(t, text) }

func setupIngestB(b *testing.B) kenv { return setupIngestTB(b, "") }

func setupIngestTB(t testing.TB, text string) kenv {
	t.Helper()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	org, _, err := account.Bootstrap(ctx, store, "A", "pro")
	require.NoError(t, err)
	e := kenv{store: store, org: org, ds: uuid.New(), store_: uuid.New()}
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		if _, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{OrgID: org, ID: e.store_, Name: "s", EmbeddingModel: embed.Lexical{}.Model(), EmbeddingDim: embed.LexicalDim}); err != nil {
			return err
		}
		_, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: org, ID: e.ds, DatastoreID: e.store_, Type: "text", Name: "t", Config: []byte("{}"), Content: []byte(text)})
		return err
	}))
	return e
}

func (e kenv) chunks(t *testing.T) (total, visible, distinctPositions int) {
	t.Helper()
	tx, err := e.store.Pool.Begin(context.Background())
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(context.Background(), "SELECT set_config('app.org_id', $1, true)", e.org.String())
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(context.Background(),
		"SELECT count(*), count(*) FILTER (WHERE visible), count(DISTINCT position) FILTER (WHERE visible) FROM chunks WHERE datasource_id = $1", e.ds).
		Scan(&total, &visible, &distinctPositions))
	return
}

func longText(paragraphs int) string {
	var b strings.Builder
	for i := 0; i < paragraphs; i++ {
		fmt.Fprintf(&b, "Paragraph %d tells of topic %d with enough words to fill part of a chunk of text for the test. ", i, i)
		b.WriteString("It goes on a little longer so that chunks hold several sentences each.\n\n")
	}
	return b.String()
}

// A job killed after embedding half the chunks, then retried, ends with
// exactly one copy of each chunk; the half-written run was never visible.
func TestIngestKilledAndRetriedLeavesOneCopy(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, longText(120))
	ctx := context.Background()
	half := &dying{ok: 2}
	k := New(e.store, half, netguard.New(netguard.Config{}))
	k.batch = 4
	err := k.Ingest(ctx, e.org, e.ds)
	require.ErrorContains(t, err, "killed")
	total, visible, _ := e.chunks(t)
	require.Equal(t, 8, total, "two batches of four were written before the kill")
	require.Zero(t, visible, "a half-written run is visible")

	good := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	good.batch = 4
	require.NoError(t, good.Ingest(ctx, e.org, e.ds))
	total, visible, positions := e.chunks(t)
	require.Equal(t, total, visible, "leftovers of the killed run remain")
	require.Equal(t, visible, positions, "a chunk is stored twice")
	want := len(Chunk(Markdown(longText(120)), DefaultChunkOptions))
	require.Equal(t, want, visible)

	// A resync replaces the chunks: still one copy each.
	require.NoError(t, good.Ingest(ctx, e.org, e.ds))
	total, visible, positions = e.chunks(t)
	require.Equal(t, want, total)
	require.Equal(t, want, visible)
	require.Equal(t, want, positions)
}

// With many chunks in the datastore, a search filtered to one datasource
// holding k matching chunks returns k: the HNSW scan keeps going
// (iterative scans) instead of filtering a fixed candidate list.
func TestFilteredSearchReturnsK(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "seed")
	ctx := context.Background()
	other := uuid.New()
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		_, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: e.org, ID: other, DatastoreID: e.store_, Type: "text", Name: "needle", Config: []byte("{}")})
		return err
	}))
	insertSynthetic(t, e, e.ds, 1500, "common haystack text about shipping parcels")
	insertSynthetic(t, e, other, 7, "needle text about shipping parcels to Lyon")
	k := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	var got []Result
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		d, err := q.GetDatastore(ctx, dbq.GetDatastoreParams{OrgID: e.org, ID: e.store_})
		if err != nil {
			return err
		}
		// The vector half alone must find all 7 (the text half matches them too).
		v, _ := embed.Lexical{}.Embed(ctx, []string{"shipping parcels"})
		vec := pgvector.NewVector(v[0])
		if err := q.TuneVectorSearch(ctx, "40"); err != nil {
			return err
		}
		rows, err := q.SearchVector512(ctx, dbq.SearchVector512Params{Query: &vec, OrgID: e.org, DatastoreIds: []uuid.UUID{e.store_}, DatasourceIds: []uuid.UUID{other}, EmbeddingModel: d.EmbeddingModel, K: 7})
		if err != nil {
			return err
		}
		require.Len(t, rows, 7, "the filtered vector search lost results")
		got, err = k.Search(ctx, q, e.org, []dbq.Datastore{d}, []uuid.UUID{other}, Text("shipping parcels"), 7)
		return err
	}))
	require.Len(t, got, 7)
	for _, r := range got {
		require.Equal(t, other, r.DatasourceID)
	}
}

// insertSynthetic writes n visible chunks with lexical embeddings.
func insertSynthetic(t *testing.T, e kenv, ds uuid.UUID, n int, text string) {
	t.Helper()
	ctx := context.Background()
	for start := 0; start < n; start += 500 {
		var rows []chunkRow
		var texts []string
		for i := start; i < min(start+500, n); i++ {
			texts = append(texts, fmt.Sprintf("%s number %d variant %d", text, i, i%97))
		}
		vecs, _ := embed.Lexical{}.Embed(ctx, texts)
		for i, tx := range texts {
			v := pgvector.NewVector(vecs[i])
			rows = append(rows, chunkRow{OrgID: e.org, ID: uuid.New(), DatastoreID: e.store_, DatasourceID: ds, Generation: 1,
				Position: int32(start + i), Text: tx, Tokens: 10, Embedding: &v, EmbeddingDim: embed.LexicalDim})
		}
		require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
			if err := writeChunks(ctx, q, rows); err != nil {
				return err
			}
			return q.PublishGeneration(ctx, dbq.PublishGenerationParams{OrgID: e.org, DatasourceID: ds, Generation: 1})
		}))
	}
	_, err := e.store.Pool.Exec(ctx, "ANALYZE chunks")
	require.NoError(t, err)
}

// At a size where it matters, the vector search uses the HNSW index (1,000
// chunks: at 50 the planner rightly scans; 4,000 cost 25 s of HNSW inserts).
// TestVectorSearchUsesHNSW: the vector half ranks a scope exactly when it
// holds at most ExactBelow chunks or its square is at most ExactRatio times
// the HNSW index's rows, else through the index, and the other branch is
// not touched (EXPLAIN ANALYZE: it "never executed").
func TestVectorSearchUsesHNSW(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "seed")
	insertSynthetic(t, e, e.ds, 1000, "assorted words for the planner") // and ANALYZE
	ctx := context.Background()
	// The index's row count as ANALYZE records it: 1,000 (this test's
	// database holds only these chunks).
	var indexed float64
	require.NoError(t, e.store.Pool.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE relname = 'chunks_embedding_512'").Scan(&indexed))
	require.InDelta(t, 1000, indexed, 1)
	tx, err := e.store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.org.String())
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE datasources SET chunk_count = 1000 WHERE id = $1", e.ds)
	require.NoError(t, err)
	v, _ := embed.Lexical{}.Embed(ctx, []string{"assorted planner"})
	plan := func(exactBelow, exactMax int64, exactRatio float64) string {
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "+searchVector512SQL(), e.org, []uuid.UUID{e.store_}, []uuid.UUID{}, embed.Lexical{}.Model(), exactBelow, exactMax, exactRatio, pgvector.NewVector(v[0]), 10)
		require.NoError(t, err)
		var plan strings.Builder
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan.WriteString(line + "\n")
		}
		require.NoError(t, rows.Err())
		return plan.String()
	}
	// A branch ran when its node reports rows, and did not when the index
	// scan says "(never executed)" or the sort (above its one-time filter)
	// read nothing.
	hnsw := regexp.MustCompile(`Index Scan using chunks_embedding_512 on chunks \w+ \(actual rows=10 `)
	hnswSkipped := regexp.MustCompile(`Index Scan using chunks_embedding_512 on chunks \w+ \(never executed\)`)
	exact := regexp.MustCompile(`Sort \(actual rows=10 loops=1\)\s+Sort Key: \(\(c\.embedding <=> `)
	exactSkipped := regexp.MustCompile(`Sort \((?:never executed|actual rows=0 loops=1)\)\s+Sort Key: \(\(c\.embedding <=> `)
	for _, c := range []struct {
		name       string
		exactBelow int64
		exactMax   int64
		exactRatio float64
		exact      bool
	}{
		{"1,000 chunks above ExactBelow 999", 999, 0, 0, false},
		{"1,000 chunks at ExactBelow", 1000, 0, 0, true},
		// 1,000² against 1,000 indexed rows: the ratio's threshold is 1,000.
		{"1,000² above ExactRatio 900 × 1,000 indexed", 0, 1000, 900, false},
		{"1,000² within ExactRatio 1,100 × 1,000 indexed", 0, 1000, 1100, true},
		{"1,000² within the ratio but above ExactMax 999", 0, 999, 1100, false},
	} {
		p := plan(c.exactBelow, c.exactMax, c.exactRatio)
		if c.exact {
			require.Regexp(t, exact, p, "%s: not ranked exactly", c.name)
			require.Regexp(t, hnswSkipped, p, "%s: the HNSW index was searched too", c.name)
		} else {
			require.Regexp(t, hnsw, p, "%s: the plan does not search the HNSW index", c.name)
			require.Regexp(t, exactSkipped, p, "%s: ranked exactly too", c.name)
		}
	}
}

// searchVector512SQL is the generated query's text, read from the generated
// code so that the test explains exactly what runs.
func searchVector512SQL() string {
	b, err := os.ReadFile("../db/dbq/knowledge.sql.go")
	if err != nil {
		panic(err)
	}
	s := string(b)
	i := strings.Index(s, "const searchVector512 = `")
	s = s[i+len("const searchVector512 = `"):]
	return s[:strings.Index(s, "`")]
}

// failingQueries embeds lexically, and fails every call once failing is set:
// an embedding provider's outage after the documents were ingested.
type failingQueries struct {
	embed.Lexical
	failing atomic.Bool
}

func (f *failingQueries) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if f.failing.Load() {
		return nil, errors.New("503 Service Unavailable")
	}
	return f.Lexical.Embed(ctx, texts)
}

// The query's embedding failing (the embedding provider down) leaves the
// search to its full-text half: the passages it finds, no error (a chat
// turn of an agent with knowledge failed as a 500).
func TestSearchWhileTheEmbedderFails(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "")
	ctx := context.Background()
	insertSynthetic(t, e, e.ds, 5, "needle text about shipping parcels to Lyon")
	emb := &failingQueries{}
	k := New(e.store, emb, netguard.New(netguard.Config{}))
	emb.failing.Store(true)
	var got []Result
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		d, err := q.GetDatastore(ctx, dbq.GetDatastoreParams{OrgID: e.org, ID: e.store_})
		if err != nil {
			return err
		}
		got, err = k.Search(ctx, q, e.org, []dbq.Datastore{d}, nil, Text("shipping parcels"), 3)
		return err
	}))
	require.Len(t, got, 3, "the full-text half's passages")
	for _, r := range got {
		require.Contains(t, r.Text, "shipping parcels")
	}
}

// A heading of a megabyte over a long section: each chunk stores, indexes
// and embeds a bounded heading path and title, not the megabyte (the
// section's every chunk repeated it).
func TestLongHeadingIsBounded(t *testing.T) {
	t.Parallel()
	var h strings.Builder
	for i := 0; h.Len() < 1<<20; i++ {
		fmt.Fprintf(&h, "w%d ", i)
	}
	e := setupIngest(t, "# "+h.String()+"\n\n"+longText(40))
	k := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	require.NoError(t, k.Ingest(context.Background(), e.org, e.ds))
	total, visible, _ := e.chunks(t)
	require.Greater(t, visible, 5)
	require.Equal(t, total, visible)
	ctx := context.Background()
	var longest int
	require.NoError(t, pgx.BeginFunc(ctx, e.store.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.org.String()); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT max(greatest(octet_length(heading), octet_length(title))) FROM chunks WHERE datasource_id = $1", e.ds).Scan(&longest)
	}))
	require.LessOrEqual(t, longest, maxHeading)
}

// An organization deleted (by an operator, in SQL) while a datasource's
// content was read ends its ingestion without an error: the quota check
// found no organization and failed the attempt, which River logged and
// retried, only for the retry to find the datasource gone.
func TestQuotaOfDeletedOrganizationEndsTheRun(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "some text")
	ctx := context.Background()
	k := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	tx, err := e.store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.org.String())
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "DELETE FROM organizations WHERE id = $1", e.org)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	require.ErrorIs(t, k.withinQuota(ctx, e.org, e.ds, 1), errGone)
}
