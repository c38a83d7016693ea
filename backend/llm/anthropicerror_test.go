package llm_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

// Anthropic reports an overload that comes after the stream's 200 as an
// SSE error event (https://docs.anthropic.com/en/api/messages-streaming,
// "Error events": overloaded_error, the 529 of a stream). It is the
// provider's transient failure: tried again while nothing went out, and
// named as the overload it is (529), never "status 200", which it used to be: the
// SDK's error carries the stream's HTTP status, 200, so the call was not
// retried and the client heard 502 "failed (status 200)".
func TestAnthropicOverloadedErrorEventIsRetried(t *testing.T) {
	t.Parallel()
	overloaded := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, "message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,"output_tokens":1}}}`)
		sse(w, "error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	}
	srv, calls := wireServer(t, anthropicWire, func(call int, w http.ResponseWriter) {
		if call == 1 {
			overloaded(w)
			return
		}
		anthropicWire.text(w, []string{"ok"}, 1, 1)
	})
	req := llm.Request{Model: "claude", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}
	text, _, _, err := collect(t, anthropicWire.newModel(srv.URL), req)
	require.NoError(t, err)
	require.Equal(t, "ok", text)
	require.EqualValues(t, 2, calls.Load())

	// Every try overloaded: a ProviderError the client hears as unavailable.
	srv, _ = wireServer(t, anthropicWire, func(_ int, w http.ResponseWriter) { overloaded(w) })
	_, _, _, err = collect(t, anthropicWire.newModel(srv.URL), req)
	var pe *llm.ProviderError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, 529, pe.Status, "%v", pe)
	require.True(t, pe.Retryable())
}
