package embed

import (
	"context"
	"sync"

	"github.com/parleyhq/parley/backend/embed/usel"
)

var useLite = maker{"use-lite", "", func(Config) (Embedder, bool, error) { return NewNeural(), true, nil }}

// Neural is the offline neural embedder, and `parley serve`'s default:
// Universal Sentence Encoder Lite (backend/embed/usel, weights compiled
// into the binary, no network, no keys). It knows that a guarantee is a
// warranty and a dog a pet, which the lexical embedder cannot: on the
// paraphrase set of docs/knowledge.md it puts the right entry in the top 5
// for 19 questions of 20 where the lexical one does for 11.
//
// The model reads 128 of its tokens at a time; a longer chunk is embedded
// window by window and the windows averaged (usel.EmbedLong), so all of a
// chunk counts. It costs CPU: some 11 ms a window with the AVX2/FMA kernel
// (ten times that on CPUs without it).
type Neural struct {
	// load reads the weights (about 80 ms) on first use, once: a process
	// that never embeds with it (a test server, an API instance whose
	// datastores use another embedder) does not pay for them.
	load func() (*usel.Model, error)
}

// NewNeural returns the embedder; the model is loaded on first use.
func NewNeural() *Neural { return &Neural{load: sync.OnceValues(usel.New)} }

// Model implements Embedder.
func (*Neural) Model() string { return usel.Name }

// Dimension implements Embedder.
func (*Neural) Dimension() int { return usel.Dim }

// Embed implements Embedder.
func (n *Neural) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	m, err := n.load()
	if err != nil {
		return nil, err
	}
	return m.EmbedLong(ctx, texts)
}
