package knowledge

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

func TestSplitPieces(t *testing.T) {
	t.Parallel()
	text := "The shop opens at nine. It closes\nat six on weekdays and at noon on Saturdays. Dogs are welcome!\n\n" +
		"Refunds take fourteen days.\nAsk at the desk."
	require.Equal(t, []string{
		"The shop opens at nine.",
		"It closes at six on weekdays and at noon on Saturdays.",
		"Dogs are welcome! Refunds take fourteen days.",
		"Ask at the desk.",
	}, splitPieces(text, 16), "hard-wrapped lines join; sentences group up to the limit")
	require.Equal(t, []string{
		"The shop opens at nine. It closes at six on weekdays and at noon on Saturdays. Dogs are welcome! Refunds take fourteen days. Ask at the desk.",
	}, splitPieces(text, 48), "a paragraph break does not end a piece that has room")
	require.Empty(t, splitPieces(" \n\n ", 48))
}

// Properties: all of the text is in the pieces, in order, and no
// piece is over the limit.
func TestSplitPiecesProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(7))
	for range 50 {
		doc := randomDoc(r)
		for _, s := range doc.Sections {
			pieces := splitPieces(s.Text, 48)
			// Whitespace aside (a word longer than a piece is cut).
			require.Equal(t, strings.Join(strings.Fields(s.Text), ""), strings.Join(strings.Fields(strings.Join(pieces, "")), ""))
			for _, p := range pieces {
				require.LessOrEqual(t, llm.CountTokens(p), 48, "%q", p)
			}
		}
	}
}

func TestMaxSim(t *testing.T) {
	t.Parallel()
	q := []float32{1, 0, 0}
	require.InDelta(t, 0.8, maxSim(q, [][]float32{{0, 1, 0}, {0.8, 0.6, 0}, {0.6, 0.8, 0}}), 1e-6)
	require.InDelta(t, -0.5, maxSim(q, [][]float32{{-0.5, 0, 0}}), 1e-6, "the best even when negative")
	require.Zero(t, maxSim(q, nil))
}
