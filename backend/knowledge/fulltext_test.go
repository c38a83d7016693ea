package knowledge

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// textStats reads, in org's tenant scope, the datastore's kept statistics
// and the same recounted from its visible chunks.
type textStats struct {
	chunks, tokens int64
	terms          map[string]int64 // term -> df, zero counts left out
}

func readTextStats(t *testing.T, e kenv, datastore uuid.UUID) (kept, counted textStats) {
	t.Helper()
	ctx := context.Background()
	kept.terms, counted.terms = map[string]int64{}, map[string]int64{}
	require.NoError(t, e.store.TenantTx(ctx, e.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		err := tx.QueryRow(ctx, `SELECT coalesce(sum(chunks), 0), coalesce(sum(tokens), 0) FROM datastore_text_stats WHERE datastore_id = $1`, datastore).
			Scan(&kept.chunks, &kept.tokens)
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT count(*), coalesce(sum(tokens), 0) FROM chunks WHERE datastore_id = $1 AND visible`, datastore).
			Scan(&counted.chunks, &counted.tokens)
		if err != nil {
			return err
		}
		read := func(into map[string]int64, sql string) error {
			rows, err := tx.Query(ctx, sql, datastore)
			if err != nil {
				return err
			}
			for rows.Next() {
				var term string
				var df int64
				if err := rows.Scan(&term, &df); err != nil {
					return err
				}
				into[term] = df
			}
			return rows.Err()
		}
		if err := read(kept.terms, `SELECT term, sum(df) FROM text_postings WHERE datastore_id = $1 GROUP BY term`); err != nil {
			return err
		}
		return read(counted.terms, `SELECT t.lexeme, count(*) FROM chunks c CROSS JOIN LATERAL unnest(c.tsv) t WHERE c.datastore_id = $1 AND c.visible GROUP BY t.lexeme`)
	}))
	return kept, counted
}

// The statistics BM25 reads stay equal to a recount of the visible chunks
// through every way chunks come and go: ingestion, a re-ingestion of other
// content, a second datasource, deleting a datasource, deleting the
// datastore; and another organization's datastore is not counted in.
func TestTextStatsFollowTheChunks(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, longText(60))
	ctx := context.Background()
	k := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	check := func(step string, wantChunks bool) {
		t.Helper()
		kept, counted := readTextStats(t, e, e.store_)
		require.Equal(t, counted, kept, "after %s", step)
		require.Equal(t, wantChunks, counted.chunks > 0, "after %s", step)
	}
	// addSource adds a text datasource to the datastore and ingests it.
	addSource := func(name, content string) {
		t.Helper()
		id := uuid.New()
		require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
			_, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: e.org, ID: id, DatastoreID: e.store_, Type: "text", Name: name, Config: []byte("{}"), Content: []byte(content)})
			return err
		}))
		require.NoError(t, k.Ingest(ctx, e.org, id))
	}
	check("creating the datastore", false)
	require.NoError(t, k.Ingest(ctx, e.org, e.ds))
	check("the first ingestion", true)

	// The same datasource with other content: the old generation goes.
	require.NoError(t, e.store.TenantTx(ctx, e.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		_, err := tx.Exec(ctx, `UPDATE datasources SET content = $2 WHERE id = $1`, e.ds, []byte("Zebras graze quietly.\n\nKangaroos hop far."))
		return err
	}))
	require.NoError(t, k.Ingest(ctx, e.org, e.ds))
	check("re-ingesting other content", true)
	kept, _ := readTextStats(t, e, e.store_)
	require.Equal(t, int64(1), kept.terms["zebra"])
	require.Zero(t, kept.terms["paragraph"], "the old generation's terms are still counted")

	addSource("u", longText(30))
	check("a second datasource", true)

	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		_, err := q.DeleteDatasource(ctx, dbq.DeleteDatasourceParams{OrgID: e.org, ID: e.ds})
		return err
	}))
	check("deleting a datasource", true)
	kept, _ = readTextStats(t, e, e.store_)
	require.Zero(t, kept.terms["zebra"])

	// Another organization's datastore with the same words counts apart.
	other := setupIngest(t, longText(10))
	require.NoError(t, New(other.store, embed.Lexical{}, netguard.New(netguard.Config{})).Ingest(ctx, other.org, other.ds))
	check("another organization's ingestion", true)

	// The datastore goes with two datasources (each cascades on its own).
	addSource("v", "Otters swim.")
	check("a third datasource", true)
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		_, err := q.DeleteDatastore(ctx, dbq.DeleteDatastoreParams{OrgID: e.org, ID: e.store_})
		return err
	}))
	require.NoError(t, e.store.TenantTx(ctx, e.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM text_postings WHERE datastore_id = $1) + (SELECT count(*) FROM datastore_text_stats WHERE datastore_id = $1)`, e.store_).Scan(&n); err != nil {
			return err
		}
		require.Zero(t, n, "a deleted datastore's statistics remain")
		return nil
	}))
}

// A rare word of the question outweighs a common one repeated: the chunk
// about holding a package ranks above the chunks that only say "package"
// often (ts_rank_cd, which has no inverse document frequency, put them
// first).
func TestFullTextRanksLikeBM25(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 12 {
		fmt.Fprintf(&b, "# Packages %d\n\nA package is installed. The package manager upgrades every package and package list %d.\n\n", i, i)
	}
	b.WriteString("# Pinning\n\nTo keep one program as it is, put it on hold with apt-mark.\n\n")
	e := setupIngest(t, b.String())
	ctx := context.Background()
	k := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	k.Chunking = ChunkOptions{MaxTokens: 40, OverlapTokens: 0}
	require.NoError(t, k.Ingest(ctx, e.org, e.ds))
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		rs, err := k.textSearch(ctx, q, e.org, []uuid.UUID{e.store_}, nil, "How can I hold a package so it is not upgraded?", 5)
		if err != nil {
			return err
		}
		require.NotEmpty(t, rs)
		require.Contains(t, rs[0].Text, "hold", "the rare word's chunk is not first: %q", rs[0].Text)

		// Words in no chunk, or only stop words: no result, no error.
		for _, query := range []string{"xylophone quartet", "the and of", "", "'\\\":|&!"} {
			rs, err := k.textSearch(ctx, q, e.org, []uuid.UUID{e.store_}, nil, query, 5)
			require.NoError(t, err, "%q", query)
			require.Empty(t, rs, "%q", query)
		}
		return nil
	}))
}

// SearchText plans the full-text half itself: which of the query's terms
// it reads under a budget (from the rarest, ties by term, the rarest always)
// and how it weighs them (idf over the visible chunks, the average chunk
// length). Each chunk here holds one term of the query once, so the chunks
// found are the chunks of the terms read, and a chunk's score is its term's
// weight.
func TestTextPlan(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "seed")
	ctx := context.Background()
	// term -> its chunks, each of tokens tokens; filler chunks hold no term
	// of the query.
	type group struct {
		word, term string
		chunks     int
		tokens     int32
	}
	groups := []group{
		{"zebra", "zebra", 1, 60},
		{"otter", "otter", 3, 20}, // df ties with lemon, which sorts first
		{"lemon", "lemon", 3, 30},
		{"apples", "appl", 5, 40},
		{"quiet filler", "", 8, 10},
	}
	var rows []chunkRow
	var texts []string
	var total int64
	termOf := map[string]string{}
	for _, g := range groups {
		for range g.chunks {
			texts = append(texts, g.word)
			rows = append(rows, chunkRow{OrgID: e.org, ID: uuid.New(), DatastoreID: e.store_, DatasourceID: e.ds, Generation: 1,
				Position: int32(len(rows)), Text: g.word, Tokens: g.tokens, EmbeddingDim: embed.LexicalDim})
			total += int64(g.tokens)
		}
		termOf[g.word] = g.term
	}
	vecs, err := embed.Lexical{}.Embed(ctx, texts)
	require.NoError(t, err)
	for i := range rows {
		v := pgvector.NewVector(vecs[i])
		rows[i].Embedding = &v
	}
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		if err := writeChunks(ctx, q, rows); err != nil {
			return err
		}
		return q.PublishGeneration(ctx, dbq.PublishGenerationParams{OrgID: e.org, DatasourceID: e.ds, Generation: 1})
	}))

	n := float64(len(rows))
	avg := float64(total) / n
	df := map[string]float64{"zebra": 1, "otter": 3, "lemon": 3, "appl": 5}
	tokens := map[string]float64{"zebra": 60, "otter": 20, "lemon": 30, "appl": 40}
	p := BM25Params{K1: 1.2, B: 0.75, TitleBoost: 5}
	// weight is BM25 of a chunk holding term once.
	weight := func(term string) float64 {
		idf := math.Log(1 + (n-df[term]+0.5)/(df[term]+0.5))
		return idf * (p.K1 + 1) / (1 + p.K1*(1-p.B+p.B*tokens[term]/avg))
	}
	search := func(query string, budget int64) map[string]int {
		t.Helper()
		read := map[string]int{} // term -> chunks found
		require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
			found, err := q.SearchText(ctx, dbq.SearchTextParams{
				Query: query, OrgID: e.org, DatastoreIds: []uuid.UUID{e.store_}, DatasourceIds: []uuid.UUID{},
				Budget: budget, K1: p.K1, B: p.B, TitleBoost: p.TitleBoost, K: 100,
			})
			for _, r := range found {
				term := termOf[r.Text]
				read[term]++
				require.InDelta(t, weight(term), r.Score, 1e-9, "the score of a chunk of %q", term)
			}
			return err
		}))
		return read
	}
	const query = "Zebra, lemon, otter or apple? Not a xylophone."
	for _, c := range []struct {
		budget int64
		want   map[string]int
	}{
		{1 << 40, map[string]int{"zebra": 1, "lemon": 3, "otter": 3, "appl": 5}},
		{12, map[string]int{"zebra": 1, "lemon": 3, "otter": 3, "appl": 5}},
		{11, map[string]int{"zebra": 1, "lemon": 3, "otter": 3}},
		{7, map[string]int{"zebra": 1, "lemon": 3, "otter": 3}},
		{6, map[string]int{"zebra": 1, "lemon": 3}},
		{4, map[string]int{"zebra": 1, "lemon": 3}},
		{3, map[string]int{"zebra": 1}},
		{0, map[string]int{"zebra": 1}}, // the rarest always
	} {
		require.Equal(t, c.want, search(query, c.budget), "budget %d", c.budget)
	}
	// Every term commoner than the budget: the rarest still counts.
	require.Equal(t, map[string]int{"otter": 3}, search("apples and otters", 2))

	// Through the search's own path, BM25Params' budget is the one applied:
	// a budget that leaves the common term out finds the rare term's chunk
	// alone.
	texts = texts[:0]
	for _, budget := range []int64{4, 6} {
		p.Budget = budget
		require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
			rs, err := p.search(ctx, q, e.org, []uuid.UUID{e.store_}, nil, "apples zebra", 10)
			for _, r := range rs {
				texts = append(texts, r.Text)
			}
			return err
		}))
	}
	require.Equal(t, []string{"zebra", "zebra", "apples", "apples", "apples", "apples", "apples"}, texts)
}
