package usel

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testdata/reference.json comes from testdata/refgen (Node, the npm
// packages): token ids and embeddings computed by TF.js.
type reference struct {
	Sentences []struct {
		Text          string
		IDs           []int32
		Embedding     []float64
		EmbeddingWasm []float64
	}
	Tokens []struct {
		Text string
		IDs  []int32
	}
	Paraphrase struct {
		Pairs []struct{ Doc, Question string }
		Hit1  int
		Hit5  int
		Ranks []int
	}
}

func loadReference(t testing.TB) reference {
	b, err := os.ReadFile("testdata/reference.json")
	require.NoError(t, err)
	var r reference
	require.NoError(t, json.Unmarshal(b, &r))
	require.NotEmpty(t, r.Sentences)
	return r
}

func TestTokensMatchReference(t *testing.T) {
	t.Parallel()
	m, err := New()
	require.NoError(t, err)
	r := loadReference(t)
	n := 0
	for _, c := range r.Tokens {
		got := m.tok.encode(c.Text)
		if len(c.IDs) == 0 {
			require.Empty(t, got, "%q", c.Text)
		} else {
			require.Equal(t, c.IDs, got, "%q", c.Text)
		}
		n++
	}
	for _, c := range r.Sentences {
		require.Equal(t, len(c.IDs), len(m.tok.encode(c.Text)), "%q", c.Text)
	}
	t.Logf("%d texts tokenized as in JavaScript", n)
}

func TestEmbeddingsMatchReference(t *testing.T) {
	t.Parallel()
	m, err := New()
	require.NoError(t, err)
	checkEmbeddings(t, m, 0.999, 5e-3)
}

// With float32 weights (go run ./internal/gen -f32 -src ... -out
// /tmp/model32.bin; USEL_MODEL_F32=/tmp/model32.bin), what is left is the
// forward pass's own rounding.
func TestEmbeddingsFloat32Weights(t *testing.T) {
	t.Parallel()
	path := os.Getenv("USEL_MODEL_F32")
	if path == "" {
		t.Skip("USEL_MODEL_F32 not set")
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	m, err := decodeModel(b)
	require.NoError(t, err)
	checkEmbeddings(t, m, 0.999999, 2e-6)
}

func checkEmbeddings(t *testing.T, m *Model, minCos, maxDiff float64) {
	r := loadReference(t)
	texts := make([]string, len(r.Sentences))
	for i, s := range r.Sentences {
		texts[i] = s.Text
	}
	got, err := m.Embed(context.Background(), texts)
	require.NoError(t, err)
	require.Len(t, got, len(texts))
	worstCos, worstDiff := 1.0, 0.0
	for i, s := range r.Sentences {
		require.Len(t, got[i], Dim)
		for name, want := range map[string][]float64{"cpu": s.Embedding, "wasm": s.EmbeddingWasm} {
			require.Len(t, want, Dim)
			var dot, nw, ng, diff float64
			for j, w := range want {
				g := float64(got[i][j])
				dot += w * g
				nw += w * w
				ng += g * g
				diff = max(diff, math.Abs(w-g))
			}
			cos := dot / math.Sqrt(nw*ng)
			t.Logf("%-4s %3d tokens cos %.7f max|diff| %.2e  %.40q", name, len(s.IDs), cos, diff, s.Text)
			require.GreaterOrEqual(t, cos, minCos, "%q", s.Text)
			require.Less(t, diff, maxDiff, "%q", s.Text)
			worstCos, worstDiff = min(worstCos, cos), max(worstDiff, diff)
		}
		require.InDelta(t, 1, math.Sqrt(float64(dotF(got[i], got[i]))), 1e-5)
	}
	t.Logf("worst cosine %.7f, worst max|diff| %.2e", worstCos, worstDiff)
}

// The paraphrase set of backend/knowledge (copied into the reference):
// right entry first / in the top 5, cosine over the 20 entries.
func TestParaphraseHits(t *testing.T) {
	t.Parallel()
	m, err := New()
	require.NoError(t, err)
	r := loadReference(t)
	p := r.Paraphrase
	require.Len(t, p.Pairs, 20)
	var docs, qs []string
	for _, x := range p.Pairs {
		docs = append(docs, x.Doc)
		qs = append(qs, x.Question)
	}
	ctx := context.Background()
	dv, err := m.Embed(ctx, docs)
	require.NoError(t, err)
	qv, err := m.Embed(ctx, qs)
	require.NoError(t, err)
	hit1, hit5 := 0, 0
	ranks := make([]int, len(qs))
	for i, q := range qv {
		order := make([]int, len(dv))
		for j := range order {
			order[j] = j
		}
		sort.SliceStable(order, func(a, b int) bool { return dotF(q, dv[order[a]]) > dotF(q, dv[order[b]]) })
		for rank, j := range order {
			if j == i {
				ranks[i] = rank
			}
		}
		if ranks[i] == 0 {
			hit1++
		}
		if ranks[i] < 5 {
			hit5++
		}
	}
	t.Logf("USE-Lite vector only: hit@1 %d/20, hit@5 %d/20 (TF.js: %d, %d); ranks %v", hit1, hit5, p.Hit1, p.Hit5, ranks)
	if !slices.Equal(p.Ranks, ranks) {
		// float16 weights move scores by ~1e-4: a near tie may swap.
		t.Logf("ranks differ from TF.js: %v", p.Ranks)
	}
	require.Equal(t, p.Hit1, hit1)
	require.Equal(t, p.Hit5, hit5)
}

func TestEmbedEdges(t *testing.T) {
	t.Parallel()
	m, err := New()
	require.NoError(t, err)
	require.Equal(t, "universal-sentence-encoder-lite", m.Model())
	require.Equal(t, 512, m.Dimension())
	m2, err := New()
	require.NoError(t, err)
	require.Same(t, m, m2)

	ctx := context.Background()
	out, err := m.Embed(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, out)

	// The graph keeps the first 128 tokens: what follows them is ignored.
	long := strings.Repeat("The parcel arrives within three working days. ", 30)
	require.Greater(t, len(m.tok.encode(long)), MaxTokens)
	require.Len(t, m.Tokens(long), MaxTokens)
	v, err := m.Embed(ctx, []string{long, long + " Something else entirely, about refunds."})
	require.NoError(t, err)
	require.Equal(t, v[0], v[1])
	// A lone text (its matmuls and heads split over goroutines) gets the
	// vector it gets in a batch, bit for bit.
	one, err := m.Embed(ctx, []string{long})
	require.NoError(t, err)
	require.Equal(t, v[0], one[0])

	// Invalid UTF-8 is read as U+FFFD.
	v, err = m.Embed(ctx, []string{"caf\xe9 ok", "caf\ufffd ok"})
	require.NoError(t, err)
	require.Equal(t, v[0], v[1])

	// Cancellation is checked between texts.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.Embed(cctx, []string{"a"})
	require.ErrorIs(t, err, context.Canceled)
}

func TestConcurrentEmbed(t *testing.T) {
	t.Parallel()
	m, err := New()
	require.NoError(t, err)
	texts := []string{"What time do you open?", "Can I bring my dog?", "Pets are welcome in the store as long as they are kept on a leash."}
	want, err := m.Embed(context.Background(), texts)
	require.NoError(t, err)
	done := make(chan [][]float32)
	for range 8 {
		go func() {
			v, _ := m.Embed(context.Background(), texts)
			done <- v
		}()
	}
	for range 8 {
		require.Equal(t, want, <-done)
	}
}

func TestHalf(t *testing.T) {
	t.Parallel()
	for h, want := range map[uint16]float32{
		0x0000: 0, 0x3c00: 1, 0xc000: -2, 0x3555: 0.33325195, 0x7bff: 65504,
		0x0001: 5.9604645e-08, 0x03ff: 6.0975552e-05, 0x0400: 6.1035156e-05, 0x8001: -5.9604645e-08,
	} {
		require.Equal(t, want, halfToFloat(h), "%#04x", h)
	}
	require.True(t, math.IsInf(float64(halfToFloat(0x7c00)), 1))
}

func dotF(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

var sink [][]float32

// BenchmarkEmbed: one text per op (but batch16chunks).
func BenchmarkEmbed(b *testing.B) {
	m, err := New()
	if err != nil {
		b.Fatal(err)
	}
	chunk := "Loyalty members earn one point per euro spent and can redeem 100 points for a voucher. " +
		"Points expire after two years of inactivity, and vouchers can be used online or in any of our shops " +
		"in France and Belgium. Members also receive early access to seasonal sales, a birthday gift and free " +
		"gift wrapping on every order placed during December."
	// 240 words, 266 o200k tokens (a default-sized chunk): the model reads
	// its first 128 SentencePiece tokens.
	long := strings.Repeat(chunk+" ", 4)
	for _, c := range []struct{ name, text string }{
		{"question", "Can I bring my dog?"},
		{"chunk60words", chunk},
		{"chunk240words", long},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			texts := []string{c.text}
			b.ReportAllocs()
			for b.Loop() {
				v, err := m.Embed(ctx, texts)
				if err != nil {
					b.Fatal(err)
				}
				sink = v
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "texts/s")
			b.ReportMetric(float64(len(m.Tokens(c.text))), "tokens")
		})
	}
	// A batch is spread over GOMAXPROCS goroutines.
	b.Run("batch16chunks", func(b *testing.B) {
		ctx := context.Background()
		texts := make([]string, 16)
		for i := range texts {
			texts[i] = chunk
		}
		b.ReportAllocs()
		for b.Loop() {
			v, err := m.Embed(ctx, texts)
			if err != nil {
				b.Fatal(err)
			}
			sink = v
		}
		b.ReportMetric(float64(b.N*len(texts))/b.Elapsed().Seconds(), "texts/s")
	})
}

// EmbedLong reads a whole text, window by window: what comes after the
// first MaxTokens tokens counts, and a short text gets what Embed gives it.
func TestEmbedLong(t *testing.T) {
	t.Parallel()
	m, err := New()
	require.NoError(t, err)
	ctx := context.Background()
	short := []string{"Can I bring my dog?", "", "Pets are welcome in the store as long as they are kept on a leash."}
	a, err := m.Embed(ctx, short)
	require.NoError(t, err)
	b, err := m.EmbedLong(ctx, short)
	require.NoError(t, err)
	for i := range a {
		require.InDeltaSlice(t, a[i], b[i], 1e-6, "text %d", i)
	}

	// The pets sentence comes after 150 tokens about parcels: Embed never
	// reads it, EmbedLong does.
	filler := strings.Repeat("The parcel arrives within three working days. ", 20)
	require.Greater(t, len(m.tok.encode(filler)), MaxTokens)
	doc := filler + "Pets are welcome in the store as long as they are kept on a leash, and dogs get a treat."
	q, err := m.Embed(ctx, []string{"Can I bring my dog?"})
	require.NoError(t, err)
	first, err := m.Embed(ctx, []string{doc})
	require.NoError(t, err)
	whole, err := m.EmbedLong(ctx, []string{doc, filler})
	require.NoError(t, err)
	require.InDelta(t, 1, dotF(whole[0], whole[0]), 1e-5, "normalised")
	require.Greater(t, dotF(whole[0], q[0]), dotF(first[0], q[0])+0.02,
		"the window that holds the pets sentence moves the vector towards the question")
	require.Greater(t, dotF(whole[0], q[0]), dotF(whole[1], q[0]), "the filler alone is further from it")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.EmbedLong(cctx, []string{doc})
	require.ErrorIs(t, err, context.Canceled)
}
