package embed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"

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
		return nil, geminiError(err)
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

// geminiError is what is kept of an error of genai's: an answered status,
// or the transport's failure. genai's own text quotes the upstream's reply
// (an error status's message, a body it could not read): free text that
// may repeat the texts sent or, from a misbehaving gateway, the key, and
// the error goes to the log and, an ingestion's, to its job's recorded
// errors (river_job.errors), in plain text. The chat adapter keeps it out
// the same way (llm.Gemini).
func geminiError(err error) error {
	var apiErr genai.APIError
	var apiErrP *genai.APIError
	var ue *url.Error
	var ne net.Error
	switch {
	case errors.As(err, &apiErr):
	case errors.As(err, &apiErrP):
		apiErr = *apiErrP
	case errors.As(err, &ue):
		// Its URL names no key (Gemini's travels in a header) and no
		// password (net/http takes it out).
		return fmt.Errorf("gemini: %w", ue)
	case errors.As(err, &ne):
		return fmt.Errorf("gemini: %w", ne)
	default:
		return errors.New("gemini: unreadable reply")
	}
	return fmt.Errorf("gemini: upstream status %d %s", apiErr.Code, apiErr.Status)
}
