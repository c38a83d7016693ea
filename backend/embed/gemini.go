package embed

import (
	"context"
	"fmt"

	"google.golang.org/genai"
)

var gemini = maker{"gemini", "PARLEY_GEMINI_API_KEY", func(c Config) (Embedder, bool, error) {
	if c.GeminiKey == "" {
		return nil, false, nil
	}
	g, err := NewGemini(c.GeminiKey, c.GeminiBaseURL, "text-embedding-004", 768)
	if err != nil {
		return nil, false, err
	}
	return g, true, nil
}}

// Gemini calls the Gemini API's embeddings (batchEmbedContents)
// through Google's Gen AI SDK, e.g. text-embedding-004 (768 dimensions).
type Gemini struct {
	client *genai.Client
	model  string
	dim    int
}

// NewGemini returns an embedder for model with dim dimensions.
func NewGemini(apiKey, baseURL, model string, dim int) (*Gemini, error) {
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: apiKey, Backend: genai.BackendGeminiAPI, HTTPOptions: genai.HTTPOptions{BaseURL: baseURL},
	})
	if err != nil {
		return nil, err
	}
	return &Gemini{client: c, model: model, dim: dim}, nil
}

// Model implements Embedder.
func (g *Gemini) Model() string { return g.model }

// Dimension implements Embedder.
func (g *Gemini) Dimension() int { return g.dim }

// Embed implements Embedder, in one call per batch of texts.
func (g *Gemini) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	contents := make([]*genai.Content, len(texts))
	for i, t := range texts {
		contents[i] = genai.NewContentFromText(t, genai.RoleUser)
	}
	dim := int32(g.dim)
	resp, err := g.client.Models.EmbedContent(ctx, g.model, contents, &genai.EmbedContentConfig{OutputDimensionality: &dim})
	if err != nil {
		return nil, err
	}
	if len(resp.Embeddings) != len(texts) {
		return nil, fmt.Errorf("gemini returned %d embeddings for %d texts", len(resp.Embeddings), len(texts))
	}
	out := make([][]float32, len(texts))
	for i, e := range resp.Embeddings {
		if len(e.Values) != g.dim {
			return nil, fmt.Errorf("gemini returned %d dimensions, want %d", len(e.Values), g.dim)
		}
		out[i] = e.Values
	}
	return out, nil
}
