package llm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// Anthropic speaks the Messages API through the official SDK.
type Anthropic struct {
	client anthropic.Client
}

// AnthropicConfig configures the Anthropic provider.
type AnthropicConfig struct {
	APIKey     string
	BaseURL    string
	HTTPClient *http.Client
}

// NewAnthropic returns the provider, with the SDK's own retries off.
func NewAnthropic(cfg AnthropicConfig) *Anthropic {
	hc := cfg.HTTPClient
	if hc == nil {
		hc = NewHTTPClient(DefaultTimeouts)
	}
	opts := []option.RequestOption{option.WithHTTPClient(hc), option.WithMaxRetries(0), option.WithAPIKey(cfg.APIKey)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	return &Anthropic{client: anthropic.NewClient(opts...)}
}

// toolsOfHistory defines the tools the messages called, with no schema,
// and forbids calling them (tool_choice "none"), for a request that offers
// the model no tools after some ran (the turn's last round: its rounds
// spent, or the window full). Anthropic refuses a request whose messages
// hold tool_use or tool_result blocks without tools defined ("Requests
// which include `tool_use` or `tool_result` blocks must define tools",
// 400): the turn failed after its tools had run. None called: no tools.
func toolsOfHistory(msgs []Message) ([]anthropic.ToolUnionParam, anthropic.ToolChoiceUnionParam) {
	var tools []anthropic.ToolUnionParam
	seen := map[string]bool{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			if !seen[c.Name] {
				seen[c.Name] = true
				tools = append(tools, anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{Properties: map[string]any{}}, c.Name))
			}
		}
	}
	if len(tools) == 0 {
		return nil, anthropic.ToolChoiceUnionParam{}
	}
	none := anthropic.NewToolChoiceNoneParam()
	return tools, anthropic.ToolChoiceUnionParam{OfNone: &none}
}

// Provider implements Model.
func (a *Anthropic) Provider() string { return "anthropic" }

// Stream implements Model.
func (a *Anthropic) Stream(ctx context.Context, req Request, yield func(Event) error) error {
	params := anthropic.MessageNewParams{
		Model:     req.Model,
		MaxTokens: int64(req.OutputBound()),
	}
	if !req.ModelTemperature {
		params.Temperature = anthropic.Float(req.Temperature)
	}
	if sys := systemWithKnowledge(req); sys != "" {
		params.System = []anthropic.TextBlockParam{{Text: sys}}
	}
	for _, m := range alternating(req.Messages) {
		var blocks []anthropic.ContentBlockParamUnion
		// Beside tool calls or results, a text that is blank (a model may
		// say only a line break before its calls) is left out: Anthropic
		// refuses a blank text block ("text content blocks must contain
		// non-whitespace text"), and the round's next call failed after
		// its tools had run.
		if strings.TrimSpace(m.Content) != "" || (len(m.ToolCalls) == 0 && len(m.ToolResults) == 0) {
			blocks = append(blocks, anthropic.NewTextBlock(m.Content))
		}
		switch m.Role {
		case RoleAssistant:
			for _, c := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, json.RawMessage(jsonObject(c.Arguments)), c.Name))
			}
			params.Messages = append(params.Messages, anthropic.NewAssistantMessage(blocks...))
			continue
		case RoleTool:
			for _, r := range m.ToolResults {
				blocks = append(blocks, anthropic.NewToolResultBlock(r.CallID, r.Content, r.IsError))
			}
			params.Messages = append(params.Messages, anthropic.NewUserMessage(blocks...))
			continue
		}
		for _, img := range m.Images {
			blocks = append(blocks, anthropic.NewImageBlockBase64(img.MIMEType, img.Base64()))
		}
		params.Messages = append(params.Messages, anthropic.NewUserMessage(blocks...))
	}
	for _, t := range req.Tools {
		schema := anthropic.ToolInputSchemaParam{Properties: t.Parameters["properties"]}
		if r, ok := t.Parameters["required"].([]string); ok {
			schema.Required = r
		}
		tool := anthropic.ToolUnionParamOfTool(schema, t.Name)
		tool.OfTool.Description = anthropic.String(t.Description)
		params.Tools = append(params.Tools, tool)
	}
	if len(req.Tools) == 0 {
		params.Tools, params.ToolChoice = toolsOfHistory(req.Messages)
	}

	stream := a.client.Messages.NewStreaming(ctx, params)
	defer stream.Close()
	type partial struct{ id, name, args string }
	calls := map[int64]*partial{}
	var usage Usage
	stopped, said, reason := false, false, ""
	var chars runes
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "message_stop":
			stopped = true
		case "message_start":
			usage.PromptTokens = ev.Message.Usage.InputTokens
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				calls[ev.Index] = &partial{id: ev.ContentBlock.ID, name: ev.ContentBlock.Name}
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				said = said || ev.Delta.Text != ""
				if text := chars.whole(ev.Delta.Text); text != "" {
					if err := yield(Event{Text: text}); err != nil {
						return err
					}
				}
			case "input_json_delta":
				if p := calls[ev.Index]; p != nil {
					p.args += ev.Delta.PartialJSON
				}
			}
		case "message_delta":
			usage.CompletionTokens = ev.Usage.OutputTokens
			reason = string(ev.Delta.StopReason)
		}
	}
	if err := stream.Err(); err != nil {
		return a.wrap(ctx, err)
	}
	if text := chars.end(); text != "" {
		if err := yield(Event{Text: text}); err != nil {
			return err
		}
	}
	if !stopped {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &ProviderError{Provider: "anthropic", Err: errors.New("the stream ended before message_stop")}
	}
	if !said && len(calls) == 0 {
		if err := endedEmpty("anthropic", reason, "end_turn", "tool_use", "stop_sequence"); err != nil {
			return billed(&usage, err, yield) // refusal, max_tokens
		}
	}
	idx := make([]int64, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(x, y int) bool { return idx[x] < idx[y] })
	for _, i := range idx {
		p := calls[i]
		if p.args == "" {
			p.args = "{}"
		}
		if err := yield(Event{ToolCall: &ToolCall{ID: p.id, Name: p.name, Arguments: p.args}}); err != nil {
			return err
		}
	}
	if cut := cutShort(reason, "max_tokens", "refusal", "model_context_window_exceeded"); cut != nil {
		if err := yield(*cut); err != nil {
			return err
		}
	}
	return yield(Event{Usage: &usage})
}

func (a *Anthropic) wrap(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	pe := &ProviderError{Provider: "anthropic", Err: err}
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		pe.Status = apiErr.StatusCode
		if pe.Status < 300 {
			// An error event of a stream whose status was 200 (an
			// overload mid-stream, say): the status its type has when
			// Anthropic answers it as a response, so that it is retried
			// and named as the failure it is, not "status 200".
			pe.Status = anthropicErrorStatus(apiErr.Type())
		}
		pe.Err = errors.New(http.StatusText(pe.Status) + " " + string(apiErr.Type()))
		if apiErr.Response != nil && apiErr.StatusCode >= 300 {
			pe.RetryAfter = retryAfter(apiErr.Response.Header)
		}
	}
	return pe
}

// anthropicErrorStatus is the HTTP status Anthropic gives an error of type t
// (https://docs.anthropic.com/en/api/errors).
func anthropicErrorStatus(t anthropic.ErrorType) int {
	switch t {
	case anthropic.ErrorTypeInvalidRequestError:
		return http.StatusBadRequest
	case anthropic.ErrorTypeAuthenticationError:
		return http.StatusUnauthorized
	case anthropic.ErrorTypeBillingError:
		return http.StatusPaymentRequired
	case anthropic.ErrorTypePermissionError:
		return http.StatusForbidden
	case anthropic.ErrorTypeNotFoundError:
		return http.StatusNotFound
	case anthropic.ErrorTypeRateLimitError:
		return http.StatusTooManyRequests
	case anthropic.ErrorTypeTimeoutError:
		return http.StatusGatewayTimeout
	case anthropic.ErrorTypeOverloadedError:
		return 529
	}
	return http.StatusInternalServerError // api_error, or a type this code does not know
}

// runes joins text deltas into whole characters. Anthropic's SDK hands a
// delta's bytes on as they came (encoding/json makes them UTF-8 for the
// other providers), and a gateway may cut a character between two deltas:
// a token that is not UTF-8 cannot go out over Connect, and the stream
// failed. A delta that ends inside a character keeps those bytes for the
// next; bytes that are no UTF-8 at all become U+FFFD.
type runes struct{ rest string }

func (r *runes) whole(s string) string {
	s, r.rest = r.rest+s, ""
	// A character begun in the last bytes and not ended waits.
	for i := len(s) - 1; i >= 0 && i > len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:]) {
				s, r.rest = s[:i], s[i:]
			}
			break
		}
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// end is what waited when the stream ended.
func (r *runes) end() string {
	s := r.rest
	r.rest = ""
	return strings.ToValidUTF8(s, "\uFFFD")
}
