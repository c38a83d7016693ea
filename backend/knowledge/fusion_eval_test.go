package knowledge

import (
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
