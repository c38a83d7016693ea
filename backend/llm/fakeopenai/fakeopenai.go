// Package fakeopenai writes the OpenAI chat.completions wire format: the
// streaming chunks (SSE of chat.completion.chunk objects, the usage chunk,
// data: [DONE]) and the whole JSON completion. Test providers and the load
// generator's fake model speak it; the model providers themselves are not
// reachable from tests.
package fakeopenai

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Chunk writes one streamed chunk whose delta is the JSON object delta.
func Chunk(w io.Writer, delta string) {
	fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"fake","choices":[{"index":0,"delta":%s,"finish_reason":null}]}`+"\n\n", delta)
}

// Token writes a chunk of answer text.
func Token(w io.Writer, text string) {
	tj, _ := json.Marshal(text)
	Chunk(w, `{"content":`+string(tj)+`}`)
}

// End writes the end of a stream: the finish reason, the usage chunk
// (stream_options.include_usage) and [DONE].
func End(w io.Writer, finish string, prompt, completion int) {
	finishChunk(w, finish)
	fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"fake","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", prompt, completion, prompt+completion)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// EndWithoutUsage writes the end of a stream of a server that reports no
// usage (one that ignores stream_options): the finish reason and [DONE].
func EndWithoutUsage(w io.Writer, finish string) {
	finishChunk(w, finish)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func finishChunk(w io.Writer, finish string) {
	fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"fake","choices":[{"index":0,"delta":{},"finish_reason":%q}]}`+"\n\n", finish)
}

// Completion writes a whole (non-streamed) chat.completion object.
func Completion(w io.Writer, text string, prompt, completion int) {
	tj, _ := json.Marshal(text)
	fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"fake","choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, tj, prompt, completion, prompt+completion)
}

// Model is an http.Handler serving POST /v1/chat/completions with a fixed
// answer: streamed token by token (Gap before each token after the first)
// when the request asks for a stream, whole otherwise. It keeps nothing per
// call, so it holds thousands of streams at once.
type Model struct {
	Tokens []string
	// Gap is the wait before each token but the first: a slow model drips.
	Gap time.Duration
}

func (m *Model) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	var body struct {
		Stream bool `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad JSON","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	const prompt = 12
	if !body.Stream {
		w.Header().Set("Content-Type", "application/json")
		Completion(w, strings.Join(m.Tokens, ""), prompt, len(m.Tokens))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	var timer *time.Timer
	for i, tok := range m.Tokens {
		if i > 0 && m.Gap > 0 {
			if timer == nil {
				timer = time.NewTimer(m.Gap)
			} else {
				timer.Reset(m.Gap)
			}
			select {
			case <-r.Context().Done():
				return
			case <-timer.C:
			}
		}
		if i == 0 {
			Chunk(w, `{"role":"assistant","content":""}`)
		}
		Token(w, tok)
		if m.Gap > 0 || i == 0 {
			fl.Flush()
		}
	}
	End(w, "stop", prompt, len(m.Tokens))
}
