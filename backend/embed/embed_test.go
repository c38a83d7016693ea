package embed

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

	// Made as the server makes them: by name, from the configuration.
	_, all, err := New(Config{OpenAIKey: "sk-test", OpenAIBaseURL: openaiSrv.URL + "/v1", GeminiKey: "gm-test", GeminiBaseURL: geminiSrv.URL})
	require.NoError(t, err)
	var names []string
	for _, e := range all {
		names = append(names, e.Model())
	}
	require.Equal(t, []string{"universal-sentence-encoder-lite", "parley-lexical-v1", "text-embedding-3-small", "text-embedding-004"}, names)
	for _, e := range all[2:] {
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

// The configuration alone chooses: the default by name, the provider
// embedders only with their keys, and a name that cannot be had is an
// error saying what it needs.
func TestNew(t *testing.T) {
	def, all, err := New(Config{})
	require.NoError(t, err)
	require.Equal(t, "parley-lexical-v1", def.Model(), "the tests' default")
	require.Len(t, all, 2, "the offline ones")

	def, _, err = New(Config{Default: "use-lite"})
	require.NoError(t, err)
	require.Equal(t, "universal-sentence-encoder-lite", def.Model())
	require.Equal(t, 512, def.Dimension())

	_, _, err = New(Config{Default: "openai"})
	require.EqualError(t, err, `embeddings "openai" needs PARLEY_OPENAI_API_KEY`)
	_, _, err = New(Config{Default: "gemini", OpenAIKey: "sk"})
	require.EqualError(t, err, `embeddings "gemini" needs PARLEY_GEMINI_API_KEY`)
	_, _, err = New(Config{Default: "word2vec"})
	require.ErrorContains(t, err, "use use-lite, lexical, openai (needs PARLEY_OPENAI_API_KEY), gemini (needs PARLEY_GEMINI_API_KEY)")

	def, all, err = New(Config{Default: "openai", OpenAIKey: "sk"})
	require.NoError(t, err)
	require.Equal(t, "text-embedding-3-small", def.Model())
	require.Len(t, all, 3)
}

// A compatible server that answers with fewer vectors, a repeated index or
// another dimension than asked is an error, not a nil or short vector
// handed on to pgvector or the search.
func TestOpenAIBadReplies(t *testing.T) {
	t.Parallel()
	for name, data := range map[string]func(n int) []map[string]any{
		"fewer": func(n int) []map[string]any {
			return []map[string]any{{"object": "embedding", "index": 0, "embedding": make([]float32, 4)}}
		},
		"repeated index": func(n int) []map[string]any {
			var d []map[string]any
			for range n {
				d = append(d, map[string]any{"object": "embedding", "index": 0, "embedding": make([]float32, 4)})
			}
			return d
		},
		"dimension": func(n int) []map[string]any {
			var d []map[string]any
			for i := range n {
				d = append(d, map[string]any{"object": "embedding", "index": i, "embedding": make([]float32, 3)})
			}
			return d
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var body struct{ Input []string }
				b, _ := io.ReadAll(r.Body)
				require.NoError(t, json.Unmarshal(b, &body))
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data(len(body.Input)), "model": "m"})
			}))
			defer srv.Close()
			out, err := NewOpenAI("sk-test", srv.URL, "m", 4).Embed(context.Background(), []string{"a", "b"})
			require.Error(t, err, "got %v", out)
		})
	}
}

// genai quotes the upstream's reply in its errors (an error status's
// message, a body it cannot read): a gateway's free text, which may repeat
// the texts and the key it was sent. The error, logged and recorded in the
// ingestion job's errors, keeps the status only.
func TestGeminiErrorsKeepNoUpstreamText(t *testing.T) {
	t.Parallel()
	for name, reply := range map[string]struct {
		status int
		body   string
	}{
		"error status":     {http.StatusBadRequest, `{"error": {"code": 400, "message": "API key not valid: %s for %s", "status": "INVALID_ARGUMENT"}}`},
		"plain text error": {http.StatusBadGateway, "gateway trouble: key %s, texts %s"},
		"unreadable reply": {http.StatusOK, "gateway trouble: key %s, texts %s"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(reply.status)
				fmt.Fprintf(w, reply.body, r.Header.Get("X-Goog-Api-Key"), strings.ReplaceAll(strings.TrimSpace(string(b)), `"`, `'`))
			}))
			defer srv.Close()
			g, err := NewGemini("gm-secret-key", srv.URL, "text-embedding-004", 4)
			require.NoError(t, err)
			_, err = g.Embed(context.Background(), []string{"my card is 4111-1111-1111-1111"})
			require.Error(t, err)
			msg := fmt.Sprintf("%v %+v", err, err)
			require.NotContains(t, msg, "gm-secret-key")
			require.NotContains(t, msg, "4111-1111-1111-1111")
			require.NotContains(t, msg, "trouble")
			if reply.status != http.StatusOK {
				require.Contains(t, msg, fmt.Sprint(reply.status))
			}
		})
	}
}
