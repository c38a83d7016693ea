package knowledge

import (
	"math"
	"sort"

	"github.com/google/uuid"
)

// rrfK is reciprocal rank fusion's constant.
const rrfK = 60

// fuseRanks merges the lists by weighted reciprocal rank fusion, best
// first: a chunk scores the sum over the lists of weight/(rrfK+rank), the
// vector lists weighing 1 and the full-text list textWeight. The search
// fused so until the evaluation found fusing scores better (fuse); kept
// for the evaluation's comparison and the reranking experiment.
func fuseRanks(l ranked, textWeight float64) []Result {
	type hit struct {
		row   Result
		score float64
	}
	hits := map[uuid.UUID]*hit{}
	add := func(rank int, r Result, w float64) {
		h := hits[r.ChunkID]
		if h == nil {
			h = &hit{row: r}
			hits[r.ChunkID] = h
		} else if r.Similarity > 0 {
			h.row.Similarity = r.Similarity
		}
		h.score += w / float64(rrfK+rank+1)
	}
	for _, list := range l.vector {
		for i, r := range list {
			add(i, r, 1)
		}
	}
	for i, r := range l.text {
		add(i, r, textWeight)
	}
	out := make([]Result, 0, len(hits))
	best := (1 + textWeight) / float64(rrfK+1)
	for _, h := range hits {
		h.row.Score = min(h.score/best, 1)
		out = append(out, h.row)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].ChunkID.String() < out[j].ChunkID.String()
	})
	return out
}

// filled is the experiment of filling each list's missing scores before the
// score fusion: every candidate the full-text list brought gets its cosine
// similarity to the question (its vector read from evalFill), as if the
// vector half had scored the full-text half's candidates too.
func filled(l ranked, share float64) []Result {
	if len(l.vector) != 1 || evalFill.q == nil {
		return fuse(l, share)
	}
	in := map[uuid.UUID]bool{}
	vec := append([]Result(nil), l.vector[0]...)
	for _, r := range vec {
		in[r.ChunkID] = true
	}
	for _, r := range l.text {
		if !in[r.ChunkID] {
			r.Similarity = cosine(evalFill.q, evalFill.vecs[r.ChunkID])
			vec = append(vec, r)
		}
	}
	return fuse(ranked{vector: [][]Result{vec}, text: l.text}, share)
}

// evalFill is the current question's vector and its datastore's chunk
// vectors, for filled.
var evalFill struct {
	q    []float32
	vecs map[uuid.UUID][]float32
	bm25 map[uuid.UUID]float64 // every chunk the full-text half scores (up to 1,000)
}

// filledBoth fills the full-text list too: every candidate the vector list
// brought gets its BM25 score (0 when it holds none of the terms read).
func filledBoth(l ranked, share float64) []Result {
	if len(l.vector) != 1 || evalFill.q == nil {
		return fuse(l, share)
	}
	in := map[uuid.UUID]bool{}
	text := append([]Result(nil), l.text...)
	for _, r := range text {
		in[r.ChunkID] = true
	}
	for _, r := range l.vector[0] {
		if !in[r.ChunkID] {
			r.Score = evalFill.bm25[r.ChunkID]
			text = append(text, r)
		}
	}
	return filled(ranked{vector: l.vector, text: text}, share)
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}
