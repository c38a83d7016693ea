package knowledge

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/embed/usel"
)

// The reranking experiment of docs/benchmarks.md ("Sentence pieces and
// reranking", issue 12): each chunk's sentence pieces embedded here, in the
// test, and ways of reordering the fused candidates with them. None paid
// its cost, so none is in the product; the methods run with
// PARLEY_EVAL_RERANK=1. The ceiling rows (where the answer is among the
// fused candidates at all) always run: they bound what any reranking of
// the candidates can reach.

// evalQuery is what a reranking method knows of a question beside the lists.
type evalQuery struct {
	vec    []float32                            // the query's embedding
	pieces map[string]map[uuid.UUID][][]float32 // piece set -> chunk -> piece vectors
	heads  map[uuid.UUID][]float32              // chunk -> its title > heading's vector
	chunks []evalChunk                          // all of the datastore's
	holds  map[uuid.UUID]bool                   // the chunks holding the answer
}

// rerankEval holds the experiment's state for TestEvalRetrieval: the
// current question's vectors, and each method's number of candidates.
type rerankEval struct {
	emb        embed.Embedder
	on         bool // PARLEY_EVAL_RERANK
	x          evalQuery
	candidates map[string]int // method -> candidates per list
}

func newRerankEval(emb embed.Embedder) *rerankEval {
	return &rerankEval{emb: emb, on: os.Getenv("PARLEY_EVAL_RERANK") != "", candidates: map[string]int{}}
}

// ingested embeds the pieces of a datastore of the experiment's embedder.
func (rr *rerankEval) ingested(t *testing.T, emb embed.Embedder, chunks []evalChunk) {
	if rr.on && emb.Model() == rr.emb.Model() {
		rr.x.pieces, rr.x.heads = embedPieces(t, emb, chunks)
		rr.x.chunks = chunks
	}
}

// question embeds q for the experiment's methods.
func (rr *rerankEval) question(ctx context.Context, method, q string, holds map[uuid.UUID]bool) error {
	if _, ok := rr.candidates[method]; !ok {
		return nil
	}
	rr.x.holds = holds
	if !rr.on {
		return nil
	}
	v, err := rr.emb.Embed(ctx, []string{q})
	if err != nil {
		return err
	}
	rr.x.vec = v[0]
	return nil
}

// pieceSet is one way of making a chunk's pieces. (Pieces pooled from the
// chunk's own windows, "late48+h", were measured at commit f35991c.)
type pieceSet struct {
	name    string
	context bool // the chunk's title > heading prepended to each piece
}

// pieceTokens is a piece's size: one to three sentences. 24 and 96 were
// tried and were worse (docs/benchmarks.md).
const pieceTokens = 48

var evalPieceSets = []pieceSet{{"s48", false}, {"s48+h", true}}

// embedPieces embeds the pieces of each chunk for every piece set, and each
// chunk's title > heading.
func embedPieces(t *testing.T, emb embed.Embedder, chunks []evalChunk) (map[string]map[uuid.UUID][][]float32, map[uuid.UUID][]float32) {
	t.Helper()
	ctx := context.Background()
	out := map[string]map[uuid.UUID][][]float32{}
	for _, ps := range evalPieceSets {
		out[ps.name] = map[uuid.UUID][][]float32{}
		start := time.Now()
		byChunk := map[uuid.UUID][]string{}
		var texts []string
		seen := map[string]bool{}
		for _, c := range chunks {
			prefix := ""
			if ps.context {
				prefix = EmbedText(c.title, c.heading, "")
			}
			for _, p := range splitPieces(c.raw, pieceTokens) {
				s := prefix + p
				byChunk[c.id] = append(byChunk[c.id], s)
				if !seen[s] {
					seen[s] = true
					texts = append(texts, s)
				}
			}
		}
		vecs, err := emb.Embed(ctx, texts)
		require.NoError(t, err)
		vec := map[string][]float32{}
		for i, s := range texts {
			vec[s] = vecs[i]
		}
		for id, ss := range byChunk {
			for _, s := range ss {
				out[ps.name][id] = append(out[ps.name][id], vec[s])
			}
		}
		t.Logf("pieces %s of %d chunks: %d texts, %s", ps.name, len(chunks), len(texts), time.Since(start).Round(time.Millisecond))
	}
	heads := map[uuid.UUID][]float32{}
	texts := make([]string, len(chunks))
	for i, c := range chunks {
		texts[i] = EmbedText(c.title, c.heading, "")
	}
	vecs, err := emb.Embed(ctx, texts)
	require.NoError(t, err)
	for i, c := range chunks {
		heads[c.id] = vecs[i]
	}
	return out, heads
}

// methods are the experiment's methods, for the neural datastore.
func (rr *rerankEval) methods() []evalMethod {
	var out []evalMethod
	add := func(name string, n int, f func(l ranked, x evalQuery) []Result) {
		rr.candidates[name] = n
		out = append(out, evalMethod{name, rr.emb.Model(), func(l ranked) []Result { return f(l, rr.x) }})
	}
	// The ceiling: the answer's chunk first when it is among the fused
	// top n, the fused order otherwise.
	for _, n := range []int{10, 20, 50} {
		add(fmt.Sprintf("ceiling: answer first when in fused top %d", n), n, func(l ranked, x evalQuery) []Result {
			return rerankBy(l, n, func(r Result, i int) float64 {
				if x.holds[r.ChunkID] {
					return 1
				}
				return -float64(i)
			})
		})
	}
	if !rr.on {
		return out
	}
	maxSimOf := func(set string) func(x evalQuery, id uuid.UUID) float64 {
		return func(x evalQuery, id uuid.UUID) float64 { return maxSim(x.vec, x.pieces[set][id]) }
	}
	for _, ps := range evalPieceSets {
		ms := maxSimOf(ps.name)
		for _, n := range []int{20, 50} {
			add(fmt.Sprintf("rerank top %d by max-sim %s", n, ps.name), n, func(l ranked, x evalQuery) []Result {
				return rerankBy(l, n, func(r Result, _ int) float64 { return ms(x, r.ChunkID) })
			})
			add(fmt.Sprintf("rrf top %d with max-sim %s", n, ps.name), n, func(l ranked, x evalQuery) []Result {
				return rrfWith(l, n, 1, func(r Result) float64 { return ms(x, r.ChunkID) })
			})
		}
	}
	ms48, ms48h := maxSimOf("s48"), maxSimOf("s48+h")
	add("rrf top 20 with max-sim s48, weight 0.5", 20, func(l ranked, x evalQuery) []Result {
		return rrfWith(l, 20, 0.5, func(r Result) float64 { return ms48(x, r.ChunkID) })
	})
	add("rrf top 20 with heading sim", 20, func(l ranked, x evalQuery) []Result {
		return rrfWith(l, 20, 1, func(r Result) float64 { return maxSim(x.vec, [][]float32{x.heads[r.ChunkID]}) })
	})
	add("rrf top 20 with max-sim s48 + heading sim/2", 20, func(l ranked, x evalQuery) []Result {
		return rrfWith(l, 20, 1, func(r Result) float64 {
			return ms48(x, r.ChunkID) + 0.5*maxSim(x.vec, [][]float32{x.heads[r.ChunkID]})
		})
	})
	add("3 lists: vector, text, candidates by max-sim s48+h", 20, func(l ranked, x evalQuery) []Result {
		return rrfLists(withList(l, func(r Result) float64 { return ms48h(x, r.ChunkID) }))
	})
	// Multi-vector retrieval (exact, over all chunks) in place of the
	// vector list.
	exact := func(name string, score func(x evalQuery, c evalChunk) float64) {
		add(name+" + text, rrf", 20, func(l ranked, x evalQuery) []Result {
			return fuse(ranked{vector: [][]Result{byScore(x.chunks, 20, func(c evalChunk) float64 { return score(x, c) })}, text: l.text}, 2)
		})
	}
	exact("all chunks exact by chunk vector", func(x evalQuery, c evalChunk) float64 { return maxSim(x.vec, [][]float32{c.vec.Slice()}) })
	exact("all chunks by max-sim s48+h", func(x evalQuery, c evalChunk) float64 { return ms48h(x, c.id) })
	exact("all chunks by chunk sim + max-sim s48", func(x evalQuery, c evalChunk) float64 {
		return maxSim(x.vec, [][]float32{c.vec.Slice()}) + ms48(x, c.id)
	})
	exact("all chunks by mean of pieces s48", func(x evalQuery, c evalChunk) float64 {
		return maxSim(x.vec, [][]float32{mean(x.pieces["s48"][c.id])})
	})
	// Pseudo-relevance feedback: the query moved towards the fused top 3.
	add("query + mean of fused top 3 (rocchio) + text, rrf", 20, func(l ranked, x evalQuery) []Result {
		f := fuseRanks(l, 2)
		vec := map[uuid.UUID][]float32{}
		for _, c := range x.chunks {
			vec[c.id] = c.vec.Slice()
		}
		q := append([]float32{}, x.vec...)
		top := f[:min(3, len(f))]
		for _, r := range top {
			for j, y := range vec[r.ChunkID] {
				q[j] += 0.5 * y / float32(len(top))
			}
		}
		q = normalized(q)
		return fuse(ranked{vector: [][]Result{byScore(x.chunks, 20, func(c evalChunk) float64 { return maxSim(q, [][]float32{vec[c.id]}) })}, text: l.text}, 2)
	})
	return out
}

// rerankBy reorders the first n of the fused list by score, best first.
func rerankBy(l ranked, n int, score func(r Result, fusedRank int) float64) []Result {
	f := fuseRanks(l, 2)
	if len(f) > n {
		f = f[:n]
	}
	sc := make([]float64, len(f))
	for i, r := range f {
		sc[i] = score(r, i)
	}
	idx := make([]int, len(f))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return sc[idx[a]] > sc[idx[b]] })
	out := make([]Result, len(f))
	for i, j := range idx {
		out[i] = f[j]
	}
	return out
}

// rrfWith fuses the fused order of the first n candidates with their order
// by score, by RRF (weight w for the latter).
func rrfWith(l ranked, n int, w float64, score func(r Result) float64) []Result {
	f := fuseRanks(l, 2)
	if len(f) > n {
		f = f[:n]
	}
	sc := make([]float64, len(f))
	idx := make([]int, len(f))
	for i, r := range f {
		sc[i] = score(r)
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return sc[idx[a]] > sc[idx[b]] })
	fused := make([]float64, len(f))
	for i := range f {
		fused[i] += 1 / float64(rrfK+i+1)
	}
	for rank, i := range idx {
		fused[i] += w / float64(rrfK+rank+1)
	}
	return rerankBy(l, n, func(_ Result, i int) float64 { return fused[i] })
}

// withList adds the candidates of both halves, ordered by score, as one
// more list of the fusion.
func withList(l ranked, score func(r Result) float64) ranked {
	seen := map[uuid.UUID]bool{}
	var all []Result
	for _, list := range append(append([][]Result{}, l.vector...), l.text) {
		for _, r := range list {
			if !seen[r.ChunkID] {
				seen[r.ChunkID] = true
				all = append(all, r)
			}
		}
	}
	sc := map[uuid.UUID]float64{}
	for _, r := range all {
		sc[r.ChunkID] = score(r)
	}
	sort.SliceStable(all, func(i, j int) bool { return sc[all[i].ChunkID] > sc[all[j].ChunkID] })
	return ranked{vector: append(append([][]Result{}, l.vector...), all), text: l.text}
}

// rrfLists is fuse without its normalisation (which clamps at 1 with more
// than two lists), every list of weight 1.
func rrfLists(l ranked) []Result {
	score := map[uuid.UUID]float64{}
	var order []Result
	for _, list := range append(append([][]Result{}, l.vector...), l.text) {
		for i, r := range list {
			if _, ok := score[r.ChunkID]; !ok {
				order = append(order, r)
			}
			score[r.ChunkID] += 1 / float64(rrfK+i+1)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return score[order[i].ChunkID] > score[order[j].ChunkID] })
	return order
}

// byScore is the first n chunks by score, as results.
func byScore(chunks []evalChunk, n int, score func(c evalChunk) float64) []Result {
	sc := make([]float64, len(chunks))
	idx := make([]int, len(chunks))
	for i, c := range chunks {
		sc[i] = score(c)
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return sc[idx[a]] > sc[idx[b]] })
	out := make([]Result, 0, n)
	for _, i := range idx[:min(n, len(idx))] {
		out = append(out, Result{ChunkID: chunks[i].id, Similarity: sc[i]})
	}
	return out
}

func mean(vs [][]float32) []float32 {
	m := make([]float32, usel.Dim)
	for _, v := range vs {
		for j, y := range v {
			m[j] += y
		}
	}
	return normalized(m)
}

func normalized(v []float32) []float32 {
	var ss float64
	for _, y := range v {
		ss += float64(y) * float64(y)
	}
	inv := float32(1 / math.Sqrt(max(ss, 1e-12)))
	for j := range v {
		v[j] *= inv
	}
	return v
}

// splitPieces (the experiment's) cuts a chunk's text into pieces of whole sentences, each of
// at most max tokens (a sentence longer than that is cut by words): the
// units a sentence encoder reads best. Line breaks inside a paragraph
// (hard-wrapped text) do not end a sentence; blank lines do.
func splitPieces(text string, max int) []string {
	var units []unit
	for _, para := range strings.Split(text, "\n\n") {
		para = strings.Join(strings.Fields(para), " ")
		if para == "" {
			continue
		}
		units = append(units, splitUnits(para+" ", max)...)
	}
	var out []string
	var b strings.Builder
	n := 0
	flush := func() {
		if s := strings.TrimSpace(b.String()); s != "" {
			out = append(out, s)
		}
		b.Reset()
		n = 0
	}
	for _, u := range units {
		if n+u.tokens > max && n > 0 {
			flush()
		}
		b.WriteString(u.text)
		n += u.tokens
	}
	flush()
	return out
}

// maxSim is the best dot product of q with any of vecs (cosine, the
// vectors being normalised), 0 with none.
func maxSim(q []float32, vecs [][]float32) float64 {
	best := 0.0
	for i, v := range vecs {
		var s float32
		for j, x := range v {
			s += x * q[j]
		}
		if i == 0 || float64(s) > best {
			best = float64(s)
		}
	}
	return best
}
