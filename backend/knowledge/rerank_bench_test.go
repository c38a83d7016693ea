package knowledge

import (
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parleyhq/parley/backend/embed"
)

// BenchmarkPieceEmbedding is what embedding each chunk's sentence pieces
// (the reranking experiment, docs/benchmarks.md) adds to ingestion with the
// neural embedder: the chunks of the Debian Policy chapters of the
// evaluation set embedded as ingestion embeds them, then their pieces.
func BenchmarkPieceEmbedding(b *testing.B) {
	dir := filepath.Join(evalDir, "debian-policy")
	files, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var chunks, pieces, piecesH []string
	for _, f := range files {
		if notContent(f.Name()) {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			b.Fatal(err)
		}
		d, _, err := Extract(context.Background(), f.Name(), raw, "")
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range Chunk(d, DefaultChunkOptions) {
			prefix := EmbedText(d.Title, p.Heading, "")
			chunks = append(chunks, EmbedText(d.Title, p.Heading, p.Text))
			for _, s := range splitPieces(p.Text, 48) {
				pieces = append(pieces, s)
				piecesH = append(piecesH, prefix+s)
			}
		}
	}
	neural := embed.NewNeural()
	ctx := context.Background()
	if _, err := neural.Embed(ctx, []string{"load the model"}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		texts []string
	}{{"chunks", chunks}, {"pieces", pieces}, {"pieces+h", piecesH}} {
		b.Run(c.name, func(b *testing.B) {
			var elapsed time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := neural.Embed(ctx, c.texts); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(len(chunks)*b.N)/elapsed.Seconds(), "chunks/s")
			b.ReportMetric(float64(len(c.texts)), "texts")
		})
	}
}

// BenchmarkMaxSimRerank is the reranking's arithmetic at query time: the
// max-sim of a query to the pieces of 20 candidates of 7 pieces each (the
// Policy chapters average 6.4), 512 dimensions.
func BenchmarkMaxSimRerank(b *testing.B) {
	r := rand.New(rand.NewSource(1))
	vec := func() []float32 {
		v := make([]float32, 512)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return normalized(v)
	}
	q := vec()
	cands := make([][][]float32, 20)
	for i := range cands {
		for range 7 {
			cands[i] = append(cands[i], vec())
		}
	}
	for b.Loop() {
		for _, c := range cands {
			_ = maxSim(q, c)
		}
	}
}
