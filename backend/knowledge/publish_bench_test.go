package knowledge

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/pgvector/pgvector-go"

	"github.com/parleyhq/parley/backend/db/dbq"
)

// BenchmarkPublish: making a finished run of PARLEY_BENCH_PUBLISH (default
// 1,000) chunks of 512 dimensions (the neural embedder's, under an HNSW
// index) the visible ones: the PublishGeneration update and the postings
// rebuilt by its trigger, without the writing of the chunks before it.
//
//	go test -run '^$' -bench Publish -benchtime 3x ./backend/knowledge/
func BenchmarkPublish(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_PUBLISH")); err == nil && v > 0 {
		n = v
	}
	env := setupIngestB(b)
	ctx := context.Background()
	if err := env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
		_, err := q.SetDatastoreEmbedder(ctx, dbq.SetDatastoreEmbedderParams{OrgID: env.org, ID: env.store_, EmbeddingModel: "bench-512", EmbeddingDim: 512})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewSource(1))
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		ds := uuid.New()
		rows := make([]chunkRow, n)
		for i := range rows {
			v := make([]float32, 512)
			for j := range v {
				v[j] = float32(r.NormFloat64())
			}
			vec := pgvector.NewVector(v)
			rows[i] = chunkRow{OrgID: env.org, ID: uuid.New(), DatastoreID: env.store_, DatasourceID: ds, Generation: 1, Position: int32(i),
				Text:  fmt.Sprintf("Paragraph %d tells of topic %d with words enough to index, vacuum %d and replication %d.", i, i%97, i%13, i%7),
				Title: "Bench", Heading: fmt.Sprintf("Section %d", i/20), Tokens: 20, Embedding: &vec, EmbeddingDim: 512}
		}
		if err := env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
			if _, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: env.org, ID: ds, DatastoreID: env.store_, Type: "text", Name: "t", Config: []byte("{}"), Content: []byte("x")}); err != nil {
				return err
			}
			for len(rows) > 0 {
				k := min(len(rows), 64)
				if err := writeChunks(ctx, q, rows[:k]); err != nil {
					return err
				}
				rows = rows[k:]
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
			return q.PublishGeneration(ctx, dbq.PublishGenerationParams{OrgID: env.org, DatasourceID: ds, Generation: 1})
		}); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "chunks/s")
}
