package knowledge

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/pgvector/pgvector-go"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/embed"
)

// englishCorpus is real English for search benchmarks: the sentences of the
// Markdown files of this module's dependencies (READMEs, changelogs, docs),
// 8 to 60 words, deduplicated and sorted. go.sum pins the modules, so the
// corpus is the same on every machine that has them (make test downloads
// them).
func englishCorpus(b *testing.B) []string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "all").Output()
	if err != nil {
		b.Skipf("go list: %v", err)
	}
	split := regexp.MustCompile(`\n\s*\n`)
	sentence := regexp.MustCompile(`(?:[.!?])\s+`)
	seen := map[string]bool{}
	for _, dir := range strings.Fields(string(out)) {
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
				return nil
			}
			raw, err := os.ReadFile(p)
			if err != nil || len(raw) > 400_000 {
				return nil
			}
			for _, para := range split.Split(string(raw), -1) {
				para = strings.Join(strings.Fields(para), " ")
				if para == "" || strings.ContainsAny(para[:1], "|`#<![") || letterShare(para) < 0.7 {
					continue
				}
				for _, s := range sentence.Split(para, -1) {
					if n := len(strings.Fields(s)); n >= 8 && n <= 60 {
						seen[s] = true
					}
				}
			}
			return nil
		})
	}
	var all []string
	for s := range seen {
		all = append(all, s)
	}
	slices.Sort(all)
	return all
}

func letterShare(s string) float64 {
	n := 0
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			n++
		}
	}
	return float64(n) / float64(len(s))
}

// BenchmarkNeuralRecall: HNSW recall@10 against exact search, and latency,
// with the neural embedder's vectors of real English sentences (every 100th
// held out as a query), at several ef_search. PARLEY_BENCH_CHUNKS caps the
// corpus.
func BenchmarkNeuralRecall(b *testing.B) {
	neural := embed.NewNeural()
	corpus := englishCorpus(b)
	var docs, queries []string
	for i, s := range corpus {
		if i%100 == 50 {
			queries = append(queries, s)
		} else {
			docs = append(docs, s)
		}
	}
	if v, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_CHUNKS")); err == nil && v > 0 && v < len(docs) {
		docs = docs[:v]
	}
	env := setupIngestB(b)
	ctx := context.Background()
	if _, err := env.store.Pool.Exec(ctx, "DROP INDEX chunks_embedding_512"); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for done := 0; done < len(docs); done += 500 {
		batch := docs[done:min(done+500, len(docs))]
		vecs, err := neural.Embed(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		rows := make([]chunkRow, len(batch))
		for i, t := range batch {
			v := pgvector.NewVector(vecs[i])
			rows[i] = chunkRow{OrgID: env.org, ID: uuid.New(), DatastoreID: env.store_, DatasourceID: env.ds, Generation: 1,
				Position: int32(done + i), Text: t, Tokens: 30, Embedding: &v, EmbeddingDim: 512}
		}
		if err := env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error { return writeChunks(ctx, q, rows) }); err != nil {
			b.Fatal(err)
		}
	}
	if err := env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
		return q.PublishGeneration(ctx, dbq.PublishGenerationParams{OrgID: env.org, DatasourceID: env.ds, Generation: 1})
	}); err != nil {
		b.Fatal(err)
	}
	loaded := time.Since(start)
	start = time.Now()
	for _, stmt := range []string{
		"CREATE INDEX chunks_embedding_512 ON chunks USING hnsw ((embedding::vector(512)) vector_cosine_ops) WHERE embedding_dim = 512",
		"ANALYZE chunks",
	} {
		if _, err := env.store.Pool.Exec(ctx, stmt); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Fprintf(os.Stderr, "%d sentences embedded and loaded in %v, HNSW built in %v; %d queries\n",
		len(docs), loaded.Round(time.Second), time.Since(start).Round(time.Second), len(queries))
	qvecs, err := neural.Embed(ctx, queries)
	if err != nil {
		b.Fatal(err)
	}
	search := func(v []float32, ef string, exact bool) []uuid.UUID {
		tx, err := env.store.Pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		q := dbq.New(tx)
		if err := q.SetTenant(ctx, env.org.String()); err != nil {
			b.Fatal(err)
		}
		if err := q.TuneVectorSearch(ctx, ef); err != nil {
			b.Fatal(err)
		}
		if exact {
			if _, err := tx.Exec(ctx, "SET LOCAL enable_indexscan = off"); err != nil {
				b.Fatal(err)
			}
		}
		vec := pgvector.NewVector(v)
		rows, err := q.SearchVector512(ctx, dbq.SearchVector512Params{Query: &vec, OrgID: env.org, DatastoreIds: []uuid.UUID{env.store_}, DatasourceIds: []uuid.UUID{}, K: 10})
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		return ids
	}
	exact := make([][]uuid.UUID, len(qvecs))
	for i, v := range qvecs {
		exact[i] = search(v, "40", true)
	}
	for _, ef := range []string{"40", "80", "200", "400"} {
		b.Run("ef"+ef, func(b *testing.B) {
			var hits, total int
			var lat []time.Duration
			for b.Loop() {
				hits, total, lat = 0, 0, lat[:0]
				for i, v := range qvecs {
					t := time.Now()
					approx := search(v, ef, false)
					lat = append(lat, time.Since(t))
					for _, id := range approx {
						if slices.Contains(exact[i], id) {
							hits++
						}
					}
					total += len(exact[i])
				}
			}
			p50, p95 := percentiles(lat)
			b.ReportMetric(float64(hits)/float64(total), "recall@10")
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(p95, "p95-ms")
		})
	}
}
