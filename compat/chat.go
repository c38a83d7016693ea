package compat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/chat"
	"github.com/parleyhq/parley/backend/conversation"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/compat/wire"
)

// WithChat adds the chat and conversation paths.
func (h *Handler) WithChat(a *chat.Admitter, turns *chat.Service, convs *conversation.Service) *Handler {
	h.admit, h.turns, h.convs = a, turns, convs
	return h
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// wantsStream: the body's streaming flag decides; without one, the Accept
// header.
func wantsStream(flag *bool, r *http.Request) bool {
	if flag != nil {
		return *flag
	}
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// admitChat admits the caller and writes the rate-limit headers.
func (h *Handler) admitChat(w http.ResponseWriter, r *http.Request, agentID, visitorID string) (*chat.Admitted, error) {
	adm, err := h.admit.Admit(r.Context(), chat.Caller{Authorization: r.Header.Get("Authorization"), ClientIP: clientIP(r)}, agentID, visitorID)
	if adm != nil {
		ratelimit.WriteHeaders(w.Header(), adm.Rate, time.Now())
	}
	return adm, err
}

// readChat reads and decodes a chat body for the path's agent.
func readChat(w http.ResponseWriter, r *http.Request) (*parleyv1.ChatRequest, *bool, error) {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return nil, nil, err
	}
	return wire.DecodeChat(r.PathValue("agentId"), body)
}

// chatV2 is POST /api/v2/agent/{agentId}/chat (SPEC §4.1).
func (h *Handler) chatV2(w http.ResponseWriter, r *http.Request) {
	if err := h.chatV2Err(w, r); err != nil {
		WriteError(w, r, err)
	}
}

func (h *Handler) chatV2Err(w http.ResponseWriter, r *http.Request) error {
	req, streaming, err := readChat(w, r)
	if err != nil {
		return err
	}
	// The stream's dialect (openapi.json): spec, the default, or text. Any
	// other value is refused, not read as the default, even for a reply
	// that does not stream: the client asked for something this server
	// does not speak.
	var textDialect bool
	switch f := r.URL.Query().Get("streamFormat"); f {
	case "", "spec":
	case "text":
		textDialect = true
	default:
		return apperr.InvalidField("streamFormat", "must be spec or text, not %q", f)
	}
	if err := h.validate(req); err != nil {
		return err
	}
	adm, err := h.admitChat(w, r, req.GetAgentId(), req.GetVisitorId())
	if err != nil {
		return err
	}
	if !wantsStream(streaming, r) {
		resp, err := h.turns.Run(r.Context(), adm, req, nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, replyJSON(resp))
		return nil
	}
	sse := newSSE(w)
	defer sse.Close()
	sse.StartAfter(chatStreamStart, "waiting for the model")
	emit := func(ev *parleyv1.ChatStreamResponse) error {
		m := eventJSON(ev, textDialect)
		if m == nil {
			return nil
		}
		data, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if ev.GetToken() != "" {
			return sse.Token("", data)
		}
		return sse.Event("", data)
	}
	_, err = h.turns.Run(r.Context(), adm, req, emit)
	if err != nil {
		if r.Context().Err() != nil {
			clientClosed(r) // nobody is listening
			return nil
		}
		if sse.Evented() {
			// The turn ended its stream with an error event; the request
			// log carries its code and status.
			streamFailed(r, err)
			return sse.Event("", []byte("[DONE]"))
		}
		if sse.Unstarted() {
			// Failed before anything went out (a bad filter, the provider
			// refused): the ordinary JSON error with its status (SPEC §7),
			// which a client reads as it reads any refused request.
			return err
		}
		// The stream started (its waiting comment) while the turn ran: the
		// status went out, so the error comes as an error event.
		writeStreamError(sse, r, err, func(body errorBody) []byte {
			data, _ := json.Marshal(map[string]any{"type": "error", "error": body.Error})
			return fmt.Appendf(nil, "data: %s\n\ndata: [DONE]\n\n", data)
		})
		return nil
	}
	return sse.Event("", []byte("[DONE]"))
}

// writeStreamError ends a stream that failed before its first event: with
// err's status (and Retry-After) when nothing went out yet, then the frames
// frame makes of the error body.
func writeStreamError(sse *sseStream, r *http.Request, err error, frame func(errorBody) []byte) {
	status, body := streamFailed(r, err)
	h := http.Header{}
	errorHeaders(h, status, body)
	sse.Fail(status, h, frame(body))
}

// replyJSON is SPEC §2.6's reply: the text under answer and response.
func replyJSON(resp *parleyv1.ChatResponse) map[string]any {
	out := doneFields(resp)
	out["answer"] = resp.GetAnswer()
	out["response"] = resp.GetAnswer()
	return out
}

func doneFields(resp *parleyv1.ChatResponse) map[string]any {
	sources := make([]map[string]any, 0, len(resp.GetSources()))
	for _, s := range resp.GetSources() {
		sources = append(sources, wire.SourceJSON(s))
	}
	u := resp.GetUsage()
	out := map[string]any{
		"conversationId": resp.GetConversationId(),
		"messageId":      resp.GetMessageId(),
		"sources":        sources,
		"usage": map[string]any{
			"promptTokens": u.GetPromptTokens(), "completionTokens": u.GetCompletionTokens(),
			"totalTokens": u.GetTotalTokens(), "tokens": u.GetTotalTokens(), "cost": u.GetCost(),
			"toolCalls": u.GetToolCalls(),
		},
		"metadata": map[string]any{
			"model": resp.GetMetadata().GetModel(), "latency": resp.GetMetadata().GetLatencyMs(),
			"provider": resp.GetMetadata().GetProvider(),
		},
	}
	if resp.GetMetadata().GetHandoff() {
		// People have the conversation: the answer is the agent's handoff message.
		out["metadata"].(map[string]any)["handoff"] = true
	}
	if v := resp.GetVisitorId(); v != "" {
		out["visitorId"] = v
	}
	if calls := resp.GetToolCalls(); len(calls) > 0 {
		list := make([]map[string]any, 0, len(calls))
		for _, c := range calls {
			list = append(list, toolCallJSON(c))
		}
		out["toolCalls"] = list
	}
	return out
}

func toolCallJSON(c *parleyv1.ToolCall) map[string]any {
	return map[string]any{"id": c.GetId(), "name": c.GetName(), "arguments": c.GetArguments(),
		"status": c.GetStatus(), "result": c.GetResult()}
}

// eventJSON is one stream event in the spec's dialect (type token, source,
// tool_call, done, error) or, with text, the other reference's (type text
// for the tokens; the rest unchanged). nil: nothing to send.
func eventJSON(ev *parleyv1.ChatStreamResponse, text bool) map[string]any {
	switch e := ev.GetEvent().(type) {
	case *parleyv1.ChatStreamResponse_Token:
		if text {
			return map[string]any{"type": "text", "text": e.Token}
		}
		return map[string]any{"type": "token", "value": e.Token}
	case *parleyv1.ChatStreamResponse_Source:
		return map[string]any{"type": "source", "source": wire.SourceJSON(e.Source)}
	case *parleyv1.ChatStreamResponse_ToolCall:
		out := toolCallJSON(e.ToolCall)
		out["type"] = "tool_call"
		return out
	case *parleyv1.ChatStreamResponse_Done:
		out := doneFields(e.Done)
		out["type"] = "done"
		return out
	case *parleyv1.ChatStreamResponse_Error:
		return map[string]any{"type": "error", "error": map[string]any{"code": e.Error.GetCode(), "message": e.Error.GetMessage()}}
	}
	return nil
}

// chatV1 is the legacy POST /api/agents/{agentId}/query (Chaindesk's v1):
// {query, conversationId?, visitorId?, streaming?} → {answer, sources,
// conversationId, visitorId, messageId}; its stream sends `event: answer`
// frames of URL-encoded text, then `event: endpoint_response` with the
// reply, then `data: [DONE]`.
func (h *Handler) chatV1(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Deprecation", "true")
	w.Header().Set("Link", `</api/v2/agent/`+url.PathEscape(r.PathValue("agentId"))+`/chat>; rel="successor-version"`)
	if err := h.chatV1Err(w, r); err != nil {
		WriteError(w, r, err)
	}
}

func (h *Handler) chatV1Err(w http.ResponseWriter, r *http.Request) error {
	req, streaming, err := readChat(w, r)
	if err != nil {
		return err
	}
	// v1 made both ids optional: new ones are made and returned.
	if req.ConversationId == "" {
		req.ConversationId = uuid.NewString()
	}
	if req.VisitorId == "" && r.Header.Get("Authorization") == "" {
		req.VisitorId = uuid.NewString()
	}
	if err := h.validate(req); err != nil {
		return err
	}
	adm, err := h.admitChat(w, r, req.GetAgentId(), req.GetVisitorId())
	if err != nil {
		return err
	}
	v1 := func(resp *parleyv1.ChatResponse, answer string) map[string]any {
		sources := make([]map[string]any, 0, len(resp.GetSources()))
		for _, s := range resp.GetSources() {
			sources = append(sources, wire.SourceJSON(s))
		}
		return map[string]any{"answer": answer, "sources": sources, "conversationId": resp.GetConversationId(),
			"visitorId": resp.GetVisitorId(), "messageId": resp.GetMessageId()}
	}
	if streaming == nil || !*streaming {
		resp, err := h.turns.Run(r.Context(), adm, req, nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v1(resp, resp.GetAnswer()))
		return nil
	}
	sse := newSSE(w)
	defer sse.Close()
	sse.StartAfter(chatStreamStart, "waiting for the model")
	var answer strings.Builder
	emit := func(ev *parleyv1.ChatStreamResponse) error {
		switch e := ev.GetEvent().(type) {
		case *parleyv1.ChatStreamResponse_Token:
			answer.WriteString(e.Token)
			return sse.Token("answer", []byte(encodeURIComponent(e.Token)))
		case *parleyv1.ChatStreamResponse_Done:
			data, err := json.Marshal(v1(e.Done, answer.String()))
			if err != nil {
				return err
			}
			return sse.Event("endpoint_response", data)
		case *parleyv1.ChatStreamResponse_Error:
			data, _ := json.Marshal(errorBody{Error: errorDetail{Code: e.Error.GetCode(), Message: e.Error.GetMessage()}})
			return sse.Event("error", data)
		}
		return nil
	}
	if _, err := h.turns.Run(r.Context(), adm, req, emit); err != nil {
		if errors.Is(err, context.Canceled) {
			if r.Context().Err() != nil {
				clientClosed(r)
			}
			return nil
		}
		if sse.Evented() {
			streamFailed(r, err) // the turn sent its error event; logged with its code and status
			return sse.Event("", []byte("[DONE]"))
		}
		if sse.Unstarted() {
			return err // the ordinary JSON error, as v1 always answered
		}
		// The stream started while the turn ran: its error is v1's error event.
		writeStreamError(sse, r, err, func(body errorBody) []byte {
			data, _ := json.Marshal(body)
			return append(wire.Frame("error", data), "data: [DONE]\n\n"...)
		})
		return nil
	}
	return sse.Event("", []byte("[DONE]"))
}

// encodeURIComponent escapes like JavaScript's function of that name, which
// v1 clients undo with decodeURIComponent.
func encodeURIComponent(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
