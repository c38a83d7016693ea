package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/genai"
)

// Gemini speaks the Gemini API (streamGenerateContent) through Google's
// official Gen AI SDK.
type Gemini struct {
	client *genai.Client
}

// GeminiConfig configures the Gemini provider.
type GeminiConfig struct {
	APIKey     string
	BaseURL    string
	HTTPClient *http.Client
}

// NewGemini returns the provider.
func NewGemini(cfg GeminiConfig) (*Gemini, error) {
	hc := cfg.HTTPClient
	if hc == nil {
		hc = NewHTTPClient(DefaultTimeouts)
	}
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: cfg.APIKey, Backend: genai.BackendGeminiAPI, HTTPClient: hc,
		HTTPOptions: genai.HTTPOptions{BaseURL: cfg.BaseURL},
	})
	if err != nil {
		return nil, err
	}
	return &Gemini{client: c}, nil
}

// Provider implements Model.
func (g *Gemini) Provider() string { return "gemini" }

// Stream implements Model.
func (g *Gemini) Stream(ctx context.Context, req Request, yield func(Event) error) error {
	cfg := &genai.GenerateContentConfig{MaxOutputTokens: int32(req.OutputBound())}
	if !req.ModelTemperature {
		temp := float32(req.Temperature)
		cfg.Temperature = &temp
	}
	if sys := systemWithKnowledge(req); sys != "" {
		cfg.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: sys}}}
	}
	var contents []*genai.Content
	for _, m := range alternating(req.Messages) {
		role := genai.RoleUser
		if m.Role == RoleAssistant {
			role = genai.RoleModel
		}
		var parts []*genai.Part
		if m.Content != "" || (len(m.ToolCalls) == 0 && len(m.ToolResults) == 0) {
			parts = append(parts, &genai.Part{Text: m.Content})
		}
		for _, c := range m.ToolCalls {
			var args map[string]any
			_ = json.Unmarshal([]byte(jsonObject(c.Arguments)), &args)
			parts = append(parts, &genai.Part{FunctionCall: &genai.FunctionCall{ID: c.ID, Name: c.Name, Args: args}, ThoughtSignature: c.Signature})
		}
		for _, r := range m.ToolResults {
			key := "output"
			if r.IsError {
				key = "error"
			}
			parts = append(parts, &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: r.CallID, Name: r.Name, Response: map[string]any{key: r.Content}}})
		}
		for _, img := range m.Images {
			parts = append(parts, &genai.Part{InlineData: &genai.Blob{MIMEType: img.MIMEType, Data: img.Data}})
		}
		contents = append(contents, &genai.Content{Role: role, Parts: parts})
	}
	if len(req.Tools) > 0 {
		var decls []*genai.FunctionDeclaration
		for _, t := range req.Tools {
			decls = append(decls, &genai.FunctionDeclaration{Name: t.Name, Description: t.Description, ParametersJsonSchema: t.Parameters})
		}
		cfg.Tools = []*genai.Tool{{FunctionDeclarations: decls}}
	}
	var usage Usage
	var calls []ToolCall
	finished, said, reason := false, false, ""
	for resp, err := range g.client.Models.GenerateContentStream(ctx, req.Model, contents, cfg) {
		if err != nil {
			return g.wrap(ctx, err)
		}
		if pf := resp.PromptFeedback; pf != nil && pf.BlockReason != "" {
			// Gemini refused the prompt itself (its safety filters, a
			// blocklist): a chunk with promptFeedback.blockReason and no
			// candidate, then the end of the stream. The same prompt is
			// refused again, so it is not retried, nor told as a cut
			// stream (which the client hears as "unavailable, try again").
			return &ProviderError{Provider: "gemini", Status: http.StatusBadRequest, Err: errors.New("the prompt was blocked: " + string(pf.BlockReason))}
		}
		if u := resp.UsageMetadata; u != nil {
			// A thinking model's thoughts are billed as output but counted
			// apart from the answer's tokens (candidatesTokenCount).
			usage = Usage{PromptTokens: int64(u.PromptTokenCount), CompletionTokens: int64(u.CandidatesTokenCount) + int64(u.ThoughtsTokenCount)}
		}
		for _, cand := range resp.Candidates {
			if cand.FinishReason != "" {
				finished, reason = true, string(cand.FinishReason)
			}
			if cand.Content == nil {
				continue
			}
			for _, p := range cand.Content.Parts {
				if p.Text != "" && !p.Thought {
					said = true
					if err := yield(Event{Text: p.Text}); err != nil {
						return err
					}
				}
				if fc := p.FunctionCall; fc != nil {
					// A call of a function without parameters comes
					// without args: {} as the other providers give it, not
					// null (shown and stored as the call's arguments).
					args := []byte("{}")
					if fc.Args != nil {
						args, _ = json.Marshal(fc.Args)
					}
					calls = append(calls, ToolCall{ID: fc.ID, Name: fc.Name, Arguments: string(args), Signature: p.ThoughtSignature})
				}
			}
		}
	}
	if !finished {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &ProviderError{Provider: "gemini", Err: errors.New("the stream ended before a finish reason")}
	}
	if !said && len(calls) == 0 {
		if err := endedEmpty("gemini", reason, "STOP"); err != nil {
			return billed(&usage, err, yield) // SAFETY, RECITATION, PROHIBITED_CONTENT, MAX_TOKENS (spent on thoughts) ...
		}
	}
	for i := range calls {
		if err := yield(Event{ToolCall: &calls[i]}); err != nil {
			return err
		}
	}
	if reason != string(genai.FinishReasonStop) {
		// MAX_TOKENS, SAFETY, RECITATION, PROHIBITED_CONTENT ...: every
		// reason but STOP ends a reply before its end.
		if err := yield(Event{Cut: reason}); err != nil {
			return err
		}
	}
	return yield(Event{Usage: &usage})
}

// geminiCause is what is kept of an error of genai's other than an answered
// status: the transport's failure, or what made a reply unreadable. genai
// quotes a reply it cannot read whole in its error ("iterateResponseStream:
// error unmarshalling data <the chunk>", "newAPIError: ... Response: <the
// body>"): the upstream's free text, which may quote the prompt or, from a
// misbehaving gateway, the key it was sent, and the turn logs the error. An
// error status's and an error event's text is kept out the same way (wrap,
// and OpenAI's and Anthropic's).
func geminiCause(err error) error {
	var ue *url.Error
	var ne net.Error
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &ue):
		// Its URL names no key (Gemini's travels in a header) and no
		// password (net/http takes it out).
		return ue
	case errors.As(err, &ne):
		return ne
	case errors.Is(err, io.ErrUnexpectedEOF):
		return io.ErrUnexpectedEOF
	case errors.As(err, &syn):
		return fmt.Errorf("unreadable reply: %w", syn)
	}
	return errors.New("unreadable reply")
}

func (g *Gemini) wrap(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	pe := &ProviderError{Provider: "gemini", Err: err}
	var apiErr genai.APIError
	var apiErrP *genai.APIError
	switch {
	case errors.As(err, &apiErr):
	case errors.As(err, &apiErrP):
		apiErr = *apiErrP
	default:
		pe.Err = geminiCause(err)
		return pe
	}
	pe.Status = apiErr.Code
	pe.Err = errors.New(apiErr.Status)
	// Gemini says when to retry in a google.rpc.RetryInfo detail.
	for _, d := range apiErr.Details {
		if t, _ := d["@type"].(string); strings.HasSuffix(t, "google.rpc.RetryInfo") {
			if s, _ := d["retryDelay"].(string); s != "" {
				if dur, err := time.ParseDuration(s); err == nil {
					pe.RetryAfter = dur
				}
			}
		}
	}
	return pe
}
