package llm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// OpenAI speaks the chat.completions API through the official SDK: OpenAI
// itself, or any OpenAI-compatible server (Ollama, vLLM, ...) at BaseURL.
type OpenAI struct {
	name      string
	client    openai.Client
	maxTokens bool
}

// OpenAIConfig configures an OpenAI-compatible provider.
type OpenAIConfig struct {
	// Name is the provider's name in replies (metadata.provider), e.g.
	// "openai" or "ollama".
	Name    string
	APIKey  string
	BaseURL string
	// HTTPClient defaults to NewHTTPClient(DefaultTimeouts): the shared
	// transport, per-phase deadlines.
	HTTPClient *http.Client
	// MaxTokens sends the reply's bound in max_tokens too, beside
	// max_completion_tokens: for compatible servers that read only the
	// older field (Ollama). Not for OpenAI's own API, whose reasoning
	// models refuse max_tokens.
	MaxTokens bool
}

// NewOpenAI returns the provider. The SDK's own retries are off: Retry does
// them, and only before the first token.
func NewOpenAI(cfg OpenAIConfig) *OpenAI {
	hc := cfg.HTTPClient
	if hc == nil {
		hc = NewHTTPClient(DefaultTimeouts)
	}
	opts := []option.RequestOption{option.WithHTTPClient(hc), option.WithMaxRetries(0), option.WithAPIKey(cfg.APIKey)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	name := cfg.Name
	if name == "" {
		name = "openai"
	}
	return &OpenAI{name: name, client: openai.NewClient(opts...), maxTokens: cfg.MaxTokens}
}

// Provider implements Model.
func (o *OpenAI) Provider() string { return o.name }

// Stream implements Model.
func (o *OpenAI) Stream(ctx context.Context, req Request, yield func(Event) error) error {
	body, err := openAIBodyFor(req, o.maxTokens)
	if err != nil {
		return err
	}
	// The request goes through the SDK as NewStreaming sends it (its
	// options, auth, base URL, error type), with the body openAIBody
	// encoded; the stream's chunks are read into streamChunk, which keeps
	// only what a turn uses, instead of the SDK's ChatCompletionChunk,
	// whose reflective decoder was a fifth of the CPU under thousands of
	// streams (issue 13, docs/benchmarks.md).
	var raw *http.Response
	err = o.client.Post(ctx, "chat/completions", body, &raw)
	stream := ssestream.NewStream[streamChunk](ssestream.NewDecoder(raw), err)
	defer stream.Close()
	type partial struct{ id, name, args string }
	// The calls in the order they began, and the one each index is at. A
	// call's fragments share its index; a fragment with an id is a call's
	// first. OpenAI gives each of parallel calls its own index, but some
	// compatible servers (Gemini's OpenAI endpoint) send them all at index
	// 0 (or none), each whole, with its own id: a new id at an index is a
	// new call, not more of the one before.
	var calls []*partial
	at := map[int64]*partial{}
	var usage *Usage
	finished, said, reason := false, false, ""
	for stream.Next() {
		chunk := stream.Current()
		for _, ch := range chunk.Choices {
			if ch.FinishReason != "" {
				finished, reason = true, ch.FinishReason
			}
			if ch.Delta.Content != "" {
				said = true
				if err := yield(Event{Text: ch.Delta.Content}); err != nil {
					return err
				}
			}
			for _, tc := range ch.Delta.ToolCalls {
				p := at[tc.Index]
				if p == nil || (tc.ID != "" && p.id != "" && tc.ID != p.id) {
					p = &partial{}
					at[tc.Index] = p
					calls = append(calls, p)
				}
				if tc.ID != "" {
					p.id = tc.ID
				}
				if tc.Function.Name != p.name {
					// Fragments of the name are joined, as the SDK's
					// accumulator joins them; but some servers (MiniMax
					// through NVIDIA NIM) send the whole name again in
					// every fragment, and joined it read
					// "web_searchweb_search", a tool no agent offers.
					p.name += tc.Function.Name
				}
				p.args += tc.Function.Arguments
			}
		}
		if chunk.Usage.TotalTokens > 0 || chunk.Usage.PromptTokens > 0 {
			usage = &Usage{PromptTokens: chunk.Usage.PromptTokens, CompletionTokens: chunk.Usage.CompletionTokens}
		}
	}
	if err := stream.Err(); err != nil {
		return o.wrap(ctx, err)
	}
	if !finished {
		// Every complete answer names why it ended; a stream closed without
		// one was cut (a proxy, a crashed server) and must not be stored as
		// a whole answer.
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &ProviderError{Provider: o.name, Err: errors.New("the stream ended without a finish reason")}
	}
	if !said && len(calls) == 0 {
		if err := endedEmpty(o.name, reason, "stop", "tool_calls", "function_call"); err != nil {
			// content_filter, length (a reasoning model's bound spent on
			// its reasoning): billed all the same.
			return billed(usage, err, yield)
		}
	}
	for _, p := range calls {
		if err := yield(Event{ToolCall: &ToolCall{ID: p.id, Name: p.name, Arguments: p.args}}); err != nil {
			return err
		}
	}
	if cut := cutShort(reason, "length", "content_filter"); cut != nil {
		if err := yield(*cut); err != nil {
			return err
		}
	}
	if usage != nil {
		return yield(Event{Usage: usage})
	}
	return nil
}

// streamChunk is the part of a chat.completion.chunk a turn reads: each
// choice's text, tool call fragments and finish reason, and the usage (the
// last chunk's, with stream_options.include_usage). Fields absent or null
// stay zero.
type streamChunk struct {
	Choices []struct {
		Delta struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				Index    int64  `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

func (o *OpenAI) wrap(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	pe := &ProviderError{Provider: o.name, Err: err}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		pe.Status = apiErr.StatusCode
		// The SDK's message may echo the request URL; keep only status and code.
		pe.Err = errors.New(http.StatusText(apiErr.StatusCode) + " " + apiErr.Code)
		pe.Final = apiErr.Code == "insufficient_quota"
		if apiErr.Response != nil {
			pe.RetryAfter = retryAfter(apiErr.Response.Header)
		}
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		// An error event inside a 200 stream: its message is the
		// upstream's free text, which may quote the prompt (or, from a
		// misbehaving OpenAI-compatible server, the request's key), and
		// it goes to the log. Keep only its type and code, as above.
		pe.Err = errors.New(strings.TrimSpace("error event mid-stream " + streamErrorKind(streamErr.Event.Data)))
	}
	return pe
}

// streamErrorKind is the type and code of a stream's error event, nothing
// of its message.
func streamErrorKind(data []byte) string {
	var ev struct {
		Error struct {
			Type string `json:"type"`
			Code any    `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &ev)
	kind := ev.Error.Type
	if c, ok := ev.Error.Code.(string); ok && c != "" {
		kind += " " + c
	} else if n, ok := ev.Error.Code.(float64); ok {
		kind += " " + strconv.FormatFloat(n, 'f', -1, 64)
	}
	return strings.TrimSpace(kind)
}

// retryAfter is the pause an error response asks for: OpenAI's
// retry-after-ms (its finer count, which it sends beside Retry-After), else
// Retry-After in seconds or as an HTTP date. A value past a day (or not a
// finite number) is read as a day: no caller waits that long, and the
// conversion of a larger float to a Duration would overflow into a
// negative, read as no pause at all.
func retryAfter(h http.Header) time.Duration {
	const most = 24 * time.Hour
	within := func(v string, unit time.Duration) (time.Duration, bool) {
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(n >= 0) {
			return 0, false
		}
		if n >= float64(most/unit) {
			return most, true
		}
		return time.Duration(n * float64(unit)), true
	}
	if d, ok := within(h.Get("Retry-After-Ms"), time.Millisecond); ok {
		return d
	}
	v := h.Get("Retry-After")
	if d, ok := within(v, time.Second); ok {
		return d
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), most)
	}
	return 0
}

// systemWithKnowledge is the system prompt with the retrieved passages, each
// labelled with its source, for providers that read knowledge as text.
func systemWithKnowledge(req Request) string {
	if len(req.Knowledge) == 0 {
		return req.System
	}
	s := req.System + "\n\nAnswer from these sources when they are relevant; name the source you use.\n"
	for i, p := range req.Knowledge {
		s += "\n[" + strconv.Itoa(i+1) + "] " + p.Source + "\n" + p.Text + "\n"
	}
	return s
}
