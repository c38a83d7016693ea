package knowledge

import (
	"context"

	"github.com/parleyhq/parley/backend/knowledge/usel"
)

// Neural is the offline neural embedder, and the default: Universal
// Sentence Encoder Lite (backend/knowledge/usel, weights compiled into the
// binary, no network, no keys). It knows that a guarantee is a warranty and
// a dog a pet, which the lexical embedder cannot: on the paraphrase set of
// docs/knowledge.md it puts the right entry in the top 5 for 19 questions of
// 20 where the lexical one does for 11.
//
// The model reads 128 of its tokens at a time; a longer chunk is embedded
// window by window and the windows averaged (usel.EmbedLong), so all of a
// chunk counts. It costs CPU: some 11 ms a window with the AVX2/FMA kernel
// (ten times that on CPUs without it).
type Neural struct{ m *usel.Model }

// NewNeural loads the model (about 80 ms, once per process).
func NewNeural() (*Neural, error) {
	m, err := usel.New()
	if err != nil {
		return nil, err
	}
	return &Neural{m: m}, nil
}

// Model implements Embedder.
func (*Neural) Model() string { return usel.Name }

// Dimension implements Embedder.
func (*Neural) Dimension() int { return usel.Dim }

// Embed implements Embedder.
func (n *Neural) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return n.m.EmbedLong(ctx, texts)
}
