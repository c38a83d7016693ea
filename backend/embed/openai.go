package embed

import (
	"context"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

var openAI = maker{"openai", "PARLEY_OPENAI_API_KEY", func(c Config) (Embedder, bool, error) {
	if c.OpenAIKey == "" {
		return nil, false, nil
	}
	return NewOpenAI(c.OpenAIKey, c.OpenAIBaseURL, "text-embedding-3-small", 1536), true, nil
}}

// OpenAI calls an OpenAI (or OpenAI-compatible) embeddings endpoint.
type OpenAI struct {
	client openai.Client
	model  string
	dim    int
}

// NewOpenAI returns an embedder for model (e.g.
// text-embedding-3-small, 1536 dimensions).
func NewOpenAI(apiKey, baseURL, model string, dim int) *OpenAI {
	opts := []option.RequestOption{option.WithAPIKey(apiKey), option.WithMaxRetries(2)}
	if baseURL != "" {
		opts = append(opts, option.WithBaseURL(baseURL))
	}
	return &OpenAI{client: openai.NewClient(opts...), model: model, dim: dim}
}

// Model implements Embedder.
func (o *OpenAI) Model() string { return o.model }

// Dimension implements Embedder.
func (o *OpenAI) Dimension() int { return o.dim }

// Embed implements Embedder, in one call per batch of texts.
func (o *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	resp, err := o.client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: o.model,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
	})
	if err != nil {
		return nil, err
	}
	// A compatible server may answer short, out of range or with another
	// model's dimension; a missing or short vector would otherwise reach
	// pgvector (or the search) as an empty one.
	if len(resp.Data) != len(texts) {
		return nil, fmt.Errorf("openai returned %d embeddings for %d texts", len(resp.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	for _, d := range resp.Data {
		if d.Index < 0 || int(d.Index) >= len(out) || out[d.Index] != nil {
			return nil, fmt.Errorf("openai returned embedding index %d for %d texts", d.Index, len(texts))
		}
		if len(d.Embedding) != o.dim {
			return nil, fmt.Errorf("openai returned %d dimensions, want %d", len(d.Embedding), o.dim)
		}
		v := make([]float32, len(d.Embedding))
		for i, x := range d.Embedding {
			v[i] = float32(x)
		}
		out[d.Index] = v
	}
	return out, nil
}
