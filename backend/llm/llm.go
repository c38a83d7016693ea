// Package llm is Parley's view of a language model: a streaming chat call
// with usage and tool calls. Providers (OpenAI and OpenAI-compatible servers,
// and the offline local engine) adapt to Model; Catalog maps the spec's model
// names to a provider and an upstream model.
//
// It must never log prompts or keys.
package llm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Role of a message in a prompt.
type Role string

// The roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	// RoleTool carries the results of the previous assistant message's
	// tool calls.
	RoleTool Role = "tool"
)

// Message is one turn of the prompt's history.
type Message struct {
	Role    Role
	Content string
	// Images are given to models that accept images.
	Images []Image
	// ToolCalls are the calls an assistant message made.
	ToolCalls []ToolCall
	// ToolResults answer them, in a RoleTool message.
	ToolResults []ToolResult
}

// alternating is msgs as the Anthropic and Gemini APIs take a
// conversation: it begins with the user, and the user and the assistant
// speak in turn. A stored history is often not so: two turns of one
// conversation run at once (a double submit, two tabs, a retry while the
// first still streams) store both questions before either answer, then the
// answers in the order they finish; a turn whose model failed stores its
// question alone; people's replies follow the agent's; the history cut to
// the prompt's budget may begin with an answer. Anthropic refused such a
// request ("first message must use the user role", "roles must alternate")
// and Gemini its contents ("multiturn requests alternate between user and
// model"): every later turn of the conversation failed. So consecutive
// messages of one role are joined into one message, their texts a paragraph
// apart and their images kept, and the answers before the first question
// are left out. Messages carrying tool calls or results are never joined
// (a turn's tool rounds alternate by construction). OpenAI takes any order
// and gets the history as it is.
//
// Chat's turns are not serialized per conversation instead (a second turn
// refused while one runs): the sequences above arise without concurrency,
// and a chat API's user expects a second message to be answered, not
// refused.
func alternating(msgs []Message) []Message {
	out := make([]Message, 0, len(msgs))
	for _, m := range msgs {
		if len(out) == 0 && m.Role == RoleAssistant {
			continue
		}
		if n := len(out); n > 0 && joinable(out[n-1], m) {
			p := &out[n-1]
			p.Content += "\n\n" + m.Content
			p.Images = slices.Concat(p.Images, m.Images)
			continue
		}
		out = append(out, m)
	}
	return out
}

// joinable: a and b are text (and images) of the same speaker.
func joinable(a, b Message) bool {
	plain := func(m Message) bool {
		return (m.Role == RoleUser || m.Role == RoleAssistant) && len(m.ToolCalls) == 0 && len(m.ToolResults) == 0
	}
	return a.Role == b.Role && plain(a) && plain(b)
}

// Image is an image the model is given: its bytes, which Parley fetched
// (never a URL for the provider to fetch: see chat's readAttachments), and
// their type, one of ImageTypes.
type Image struct {
	MIMEType string
	Data     []byte
}

// ImageTypes are the image types every provider here accepts (Gemini
// takes no GIF).
var ImageTypes = []string{"image/png", "image/jpeg", "image/webp"}

// ImageMaxBytes bounds an image every provider here accepts: Anthropic's
// 5 MiB, which it counts in base64 (a third more than the bytes).
const ImageMaxBytes = 5 << 20 * 3 / 4

// ImageMaxSide bounds an image's width and height in pixels: Anthropic
// refuses a larger one (400).
const ImageMaxSide = 8000

// Base64 is the image's bytes in standard base64 (Anthropic's form).
func (i Image) Base64() string { return base64.StdEncoding.EncodeToString(i.Data) }

// DataURL is the image as a data: URL (OpenAI's form).
func (i Image) DataURL() string { return "data:" + i.MIMEType + ";base64," + i.Base64() }

// ToolResult is what running a tool call gave, as text for the model.
type ToolResult struct {
	CallID, Name, Content string
	IsError               bool
}

// Passage is retrieved knowledge given to the model with its source.
type Passage struct {
	Source, Title, URL           string
	DatasourceID, DatasourceName string
	Text                         string
	Score                        float64
	// Similarity is the passage's embedding's cosine similarity to the
	// question's, 0 when unknown (found by full text only).
	Similarity float64
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is a JSON schema.
	Parameters map[string]any
}

// MaxOutputTokens bounds every reply, whichever the provider: each request
// sends it (Anthropic requires a bound; OpenAI and Gemini otherwise let a
// runaway answer run to the model's own limit, every token of it billed),
// and a prompt leaves room for it in the context window (Route.HistoryBudget).
// On models that think, their thinking counts against it too.
const MaxOutputTokens = 4096

// Request is one chat call.
type Request struct {
	// Model is the upstream model id.
	Model       string
	System      string
	Messages    []Message
	Temperature float64
	// ModelTemperature sends no temperature: the model's own is used
	// (Route.FixedTemperature), and Temperature is not sent.
	ModelTemperature bool
	Tools            []Tool
	Knowledge        []Passage
	// MaxTokens bounds this call's reply; 0 is MaxOutputTokens. A chat
	// turn sets it from its route's window (Route.AnswerRoom): tool
	// results grow the prompt round by round, past what the history
	// budget left for them.
	MaxTokens int
}

// OutputBound is the bound on the reply each provider is sent: MaxTokens,
// or MaxOutputTokens when it is not set.
func (r Request) OutputBound() int {
	if r.MaxTokens > 0 {
		return r.MaxTokens
	}
	return MaxOutputTokens
}

// ToolCall is a call the model asked for.
type ToolCall struct {
	ID, Name, Arguments string
	// Signature is what the provider asks to be given back with the call
	// when the call is sent again in the next request of the turn: Gemini's
	// thoughtSignature, which Gemini 3 models require on every functionCall
	// part they made ("Function call is missing a thought_signature", 400).
	// Opaque; nil for the other providers.
	Signature []byte
}

// Usage counts tokens.
type Usage struct {
	PromptTokens, CompletionTokens int64
}

// Event is one thing a stream yields: text, a tool call, the reply cut
// short, or the usage (usually last).
type Event struct {
	Text     string
	ToolCall *ToolCall
	Usage    *Usage
	// Cut is why the provider stopped a reply that had begun before its
	// end: its bound reached (OpenAI's length, Anthropic's max_tokens,
	// Gemini's MAX_TOKENS) or its filters (content_filter, refusal,
	// SAFETY ...). It comes after the reply's text and calls. (A reply so
	// stopped before its first text or call is ErrNoAnswer instead, after
	// the usage the provider reported for it: billed all the same.)
	Cut string
}

// Model streams a reply. Stream calls yield for each event in order and
// stops at the first error yield returns. It returns when the reply is
// complete, on error, or when ctx ends (and then cancels the upstream call).
type Model interface {
	Provider() string
	Stream(ctx context.Context, req Request, yield func(Event) error) error
}

// ProviderError is a failure of the upstream provider.
type ProviderError struct {
	Provider string
	// Status is the upstream HTTP status, 0 when the call did not get one
	// (connection refused or cut, timeout).
	Status int
	// RetryAfter is the upstream's Retry-After, when it sent one.
	RetryAfter time.Duration
	// Final says the upstream told why trying again cannot help, whatever
	// its status: OpenAI's 429 insufficient_quota (the account's credit is
	// spent) is not a rate limit.
	Final bool
	Err   error
}

func (e *ProviderError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s: upstream status %d: %v", e.Provider, e.Status, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Provider, e.Err)
}

func (e *ProviderError) Unwrap() error { return e.Err }

// Retryable reports whether trying again may succeed: rate limits, server
// errors and transport failures, unless the upstream said otherwise (Final).
func (e *ProviderError) Retryable() bool {
	return !e.Final && (e.Status == 0 || e.Status == 429 || e.Status >= 500)
}

// ErrNoAnswer is in the error of a reply that ended with no text and no
// call, for a reason other than a normal stop: the provider's content
// filter or safety stop, a refusal, or the reply bound spent before the
// answer began (a thinking model's thoughts). Told apart from an empty
// answer, it is not stored as one; the same request ends the same way, so
// it is not tried again.
var ErrNoAnswer = errors.New("the model ended its reply without an answer")

// endedEmpty is the error of a reply that said nothing and called nothing
// and ended for reason, nil when reason is one of normal (the provider's
// ordinary stops: an empty answer is an answer).
func endedEmpty(provider, reason string, normal ...string) error {
	if slices.Contains(normal, reason) {
		return nil
	}
	return &ProviderError{Provider: provider, Final: true, Err: fmt.Errorf("%w (%s)", ErrNoAnswer, reason)}
}

// billed yields the usage the provider reported for a reply that ended
// without an answer (err, endedEmpty's), then returns err. The provider
// bills such a call (the prompt read, the thoughts or the filtered text
// written): dropped, a thinking model that spent its whole bound on
// thoughts, or a question its filter stops, cost the organization its
// tokens with none of them counted, as often as a visitor asked.
func billed(usage *Usage, err error, yield func(Event) error) error {
	if usage != nil && (usage.PromptTokens > 0 || usage.CompletionTokens > 0) {
		if yerr := yield(Event{Usage: usage}); yerr != nil {
			return yerr
		}
	}
	return err
}

// cutShort is the event that tells a reply that said or called something
// was stopped for reason, nil when reason is not one of cut (the
// provider's stops short of the reply's end).
func cutShort(reason string, cut ...string) *Event {
	if !slices.Contains(cut, reason) {
		return nil
	}
	return &Event{Cut: reason}
}

// Retry wraps m so that a failed call is tried again, up to attempts times in
// all, with exponential backoff from base (or the provider's Retry-After, up
// when it asks for no more than maxWait), but only while nothing of the reply has been yielded: text is
// never repeated.
func Retry(m Model, attempts int, base, maxWait time.Duration) Model {
	return &retrying{Model: m, attempts: attempts, base: base, maxWait: maxWait}
}

type retrying struct {
	Model
	attempts      int
	base, maxWait time.Duration
}

func (r *retrying) Stream(ctx context.Context, req Request, yield func(Event) error) error {
	wait := r.base
	for attempt := 1; ; attempt++ {
		started := false
		err := r.Model.Stream(ctx, req, func(ev Event) error {
			started = true
			return yield(ev)
		})
		var pe *ProviderError
		if err == nil || started || attempt >= r.attempts || ctx.Err() != nil ||
			!errors.As(err, &pe) || !pe.Retryable() {
			return err
		}
		d := min(wait, r.maxWait)
		if pe.RetryAfter > r.maxWait {
			return err // honour the provider: it asks for a longer pause than a caller waits
		}
		if pe.RetryAfter > 0 {
			d = pe.RetryAfter
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		wait *= 2
	}
}

// jsonObject is a tool call's arguments as a JSON object: a model may send
// none, or (rarely) something that is not an object, and the providers that
// take arguments as structured input refuse anything else.
func jsonObject(args string) string {
	var v map[string]any
	if json.Unmarshal([]byte(args), &v) != nil || v == nil {
		return "{}" // not JSON, not an object, or null
	}
	return args
}
