package knowledge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The provider embedders against servers speaking their wire formats.
func TestProviderEmbedders(t *testing.T) {
	t.Parallel()
	vec := func(seed, dim int) []float32 {
		v := make([]float32, dim)
		v[seed%dim] = 1
		return v
	}
	openaiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/v1/embeddings", r.URL.Path)
		var body struct {
			Model string
			Input []string
		}
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &body))
		require.Equal(t, "text-embedding-3-small", body.Model)
		var data []map[string]any
		for i := range body.Input {
			data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": vec(i, 1536)})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": body.Model, "usage": map[string]any{"prompt_tokens": 3, "total_tokens": 3}})
	}))
	defer openaiSrv.Close()
	geminiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.True(t, strings.HasSuffix(r.URL.Path, "/models/text-embedding-004:batchEmbedContents"), r.URL.Path)
		var body struct {
			Requests []map[string]any `json:"requests"`
		}
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &body))
		var embs []map[string]any
		for i := range body.Requests {
			embs = append(embs, map[string]any{"values": vec(i, 768)})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"embeddings": embs})
	}))
	defer geminiSrv.Close()

	g, err := NewGeminiEmbedder("gm-test", geminiSrv.URL, "text-embedding-004", 768)
	require.NoError(t, err)
	for _, e := range []Embedder{NewOpenAIEmbedder("sk-test", openaiSrv.URL+"/v1", "text-embedding-3-small", 1536), g} {
		t.Run(e.Model(), func(t *testing.T) {
			out, err := e.Embed(context.Background(), []string{"a", "b", "c"})
			require.NoError(t, err)
			require.Len(t, out, 3)
			for i, v := range out {
				require.Len(t, v, e.Dimension())
				require.Equal(t, float32(1), v[i], fmt.Sprint("embedding ", i, " out of order"))
			}
		})
	}
}
