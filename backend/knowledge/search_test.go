package knowledge

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// The fusion weighs how far ahead a candidate is in each list, not only its
// rank: A leads the full-text list by a hair and trails the vector list by
// a hair, B is a close second in both, C leads the vectors but is far
// behind in the text. Ranks alone (reciprocal rank fusion) put A first.
func TestFuseWeighsScores(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	text := []Result{{ChunkID: a, Score: 10}, {ChunkID: b, Score: 9.9}, {ChunkID: c, Score: 1}}
	vector := []Result{{ChunkID: c, Similarity: 0.9}, {ChunkID: b, Similarity: 0.85}, {ChunkID: a, Similarity: 0.8}}
	got := fuse(ranked{vector: [][]Result{vector}, text: text}, 0.6)
	require.Len(t, got, 3)
	require.Equal(t, []uuid.UUID{b, a, c}, []uuid.UUID{got[0].ChunkID, got[1].ChunkID, got[2].ChunkID})
	for _, r := range got {
		require.True(t, r.Score > 0 && r.Score <= 1, "score %v", r.Score)
	}
	require.Equal(t, 0.85, got[0].Similarity, "a result keeps its vector similarity")
	require.Equal(t, a, fuseRanks(ranked{vector: [][]Result{vector}, text: text}, 2)[0].ChunkID, "the case tells the fusions apart")
}

// First in both lists scores 1; a list's last candidate scores above a
// chunk the list did not bring; one-element lists and ties do not divide
// by zero.
func TestFuseScale(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	got := fuse(ranked{
		vector: [][]Result{{{ChunkID: a, Similarity: 0.7}, {ChunkID: b, Similarity: 0.6}}},
		text:   []Result{{ChunkID: a, Score: 3}, {ChunkID: c, Score: 3}},
	}, 0.5)
	require.Len(t, got, 3)
	require.Equal(t, a, got[0].ChunkID)
	require.InDelta(t, 1, got[0].Score, 1e-12)
	require.Greater(t, got[1].Score, 0.0)
	require.Equal(t, c, got[1].ChunkID, "c, tied first in the text, is above b, last of the vectors")
	require.InDelta(t, 0.5, got[1].Score, 1e-12)
	require.InDelta(t, 0.5/3, got[2].Score, 1e-12, "b: a third of the way from just below the last vector to the first")

	one := fuse(ranked{text: []Result{{ChunkID: a, Score: 2}}}, 0.6)
	require.Len(t, one, 1)
	require.InDelta(t, 0.6, one[0].Score, 1e-12)
}
