package llm_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

// An error event inside a 200 stream is the upstream's free text, which an
// OpenAI-compatible server may fill with the prompt it refused (or the key
// it was sent). The ProviderError, which the turn logs whole, keeps its
// type and code only, as it does of an error status's body.
func TestOpenAIStreamErrorEventKeepsNoUpstreamText(t *testing.T) {
	t.Parallel()
	srv, _ := openAIServer(t, func(_ int, w http.ResponseWriter, body map[string]any) {
		streamHeaders(w)
		fmt.Fprintf(w, "data: {\"error\":{\"message\":\"refused the prompt %v with key Bearer sk-test\",\"type\":\"invalid_request_error\",\"code\":\"content_filter\"}}\n\n", body["messages"])
		w.(http.Flusher).Flush()
	})
	req := llm.Request{Model: "gpt-4o-mini", Messages: []llm.Message{{Role: llm.RoleUser, Content: "my card is 4111-1111-1111-1111"}}}
	_, _, _, err := collect(t, llm.NewOpenAI(llm.OpenAIConfig{APIKey: "sk-test", BaseURL: srv.URL + "/v1"}), req)
	var pe *llm.ProviderError
	require.ErrorAs(t, err, &pe)
	msg := fmt.Sprint(err) + fmt.Sprintf(" %+v", err)
	require.NotContains(t, msg, "4111-1111-1111-1111")
	require.NotContains(t, msg, "sk-test")
	require.Contains(t, msg, "invalid_request_error content_filter")
}

// genai quotes a stream chunk it cannot read whole in its error: a
// gateway's free text, which may repeat the prompt and the key it was sent.
// The ProviderError, which the turn logs whole, keeps the cause only.
func TestGeminiUnreadableChunkKeepsNoUpstreamText(t *testing.T) {
	t.Parallel()
	for name, chunk := range map[string]string{
		"not JSON":     "data: gateway trouble: prompt %q, header X-Goog-Api-Key: %s\n\n",
		"not SSE data": "trouble: prompt %q, header X-Goog-Api-Key: %s\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, chunk, body, r.Header.Get("X-Goog-Api-Key"))
			}))
			t.Cleanup(srv.Close)
			g, err := llm.NewGemini(llm.GeminiConfig{APIKey: "gm-secret-key", BaseURL: srv.URL})
			require.NoError(t, err)
			req := llm.Request{Model: "gemini-pro-latest", Messages: []llm.Message{{Role: llm.RoleUser, Content: "my card is 4111-1111-1111-1111"}}}
			_, _, _, err = collect(t, g, req)
			var pe *llm.ProviderError
			require.ErrorAs(t, err, &pe)
			require.True(t, pe.Retryable())
			msg := fmt.Sprint(err) + fmt.Sprintf(" %+v", err)
			require.NotContains(t, msg, "4111-1111-1111-1111")
			require.NotContains(t, msg, "gm-secret-key")
			require.NotContains(t, msg, "trouble")
			require.Contains(t, msg, "unreadable reply")
		})
	}
}
