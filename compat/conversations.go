package compat

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/chat"
	"github.com/parleyhq/parley/backend/conversation"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/compat/wire"
)

// Conversations (SPEC §4.2, §4.8): listings, a conversation with its
// messages, its status and rating, people's replies, and the stream of its
// events. All but replies admit themselves through conversation.Service
// (a key, or a public agent's visitor naming agentId and visitorId); replies
// are key-only (the admin scope) through h.rpc.

func (h *Handler) caller(r *http.Request) chat.Caller {
	return chat.Caller{Authorization: r.Header.Get("Authorization"), ClientIP: clientIP(r)}
}

// admitted writes the rate-limit headers of an admitted (or refused) call
// and returns err.
func admitted(w http.ResponseWriter, rate *ratelimit.Result, err error) error {
	if rate != nil {
		ratelimit.WriteHeaders(w.Header(), rate, time.Now())
	}
	return err
}

// handle runs fn, writing any error it returns in the legacy error shape.
func handle(fn func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			WriteError(w, r, err)
		}
	}
}

// listConversations is GET /api/v2/agent/{agentId}/conversations (SPEC
// §4.2): one agent's conversations.
func (h *Handler) listConversations(w http.ResponseWriter, r *http.Request) error {
	return h.list(w, r, r.PathValue("agentId"))
}

// listConversationsV2 is GET /api/v2/conversations: the organization's
// conversations (or, without a key, a public agent's visitor's own), with
// filters and a cursor.
func (h *Handler) listConversationsV2(w http.ResponseWriter, r *http.Request) error {
	return h.list(w, r, r.URL.Query().Get("agentId"))
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request, agentID string) error {
	q := r.URL.Query()
	req := &parleyv1.ListConversationsRequest{
		AgentId: agentID, VisitorId: q.Get("visitorId"), Status: q.Get("status"), Channel: q.Get("channel"),
		Cursor: q.Get("cursor"),
	}
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 32)
		if err != nil || n < 1 {
			return apperr.InvalidField("limit", "must be a positive integer (at most %d)", conversation.MaxLimit)
		}
		if n > conversation.MaxLimit {
			return apperr.InvalidField("limit", "must be at most %d", conversation.MaxLimit)
		}
		req.Limit = int32(n)
	}
	if raw := q.Get("since"); raw != "" {
		t, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			return apperr.InvalidField("since", "must be an RFC 3339 time, such as 2025-01-31T09:00:00Z")
		}
		req.Since = timestamppb.New(t)
	}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, rate, err := h.convs.List(r.Context(), h.caller(r), req)
	if err := admitted(w, rate, err); err != nil {
		return err
	}
	items := make([]map[string]any, 0, len(resp.GetConversations()))
	for _, c := range resp.GetConversations() {
		items = append(items, summaryJSON(c))
	}
	var next any
	if n := resp.GetNextCursor(); n != "" {
		next = n
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversations": items, "nextCursor": next})
	return nil
}

// getConversation is GET /api/v2/conversations/{id}: the summary and the
// messages, oldest first.
func (h *Handler) getConversation(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	req := &parleyv1.GetConversationRequest{ConversationId: r.PathValue("id"), AgentId: q.Get("agentId"), VisitorId: q.Get("visitorId")}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, rate, err := h.convs.Get(r.Context(), h.caller(r), req)
	if err := admitted(w, rate, err); err != nil {
		return err
	}
	out := summaryJSON(resp.GetConversation())
	msgs := make([]map[string]any, 0, len(resp.GetMessages()))
	for _, m := range resp.GetMessages() {
		msgs = append(msgs, messageJSON(m))
	}
	out["messages"] = msgs
	out["truncated"] = resp.GetTruncated()
	out["lastEventId"] = resp.GetLastEventId()
	writeJSON(w, http.StatusOK, out)
	return nil
}

// updateBody is a PUT /api/v2/conversations/{id} body.
type updateBody struct {
	Status *string `json:"status"`
	// Rating is read by hand, to name it in every refusal ("x", 3.5, 0).
	Rating json.RawMessage `json:"rating"`
	Reason *string         `json:"reason"`
}

// updateConversation is PUT /api/v2/conversations/{id}: status (the admin
// scope) and rating (a chat key, or the conversation's visitor).
func (h *Handler) updateConversation(w http.ResponseWriter, r *http.Request) error {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return err
	}
	var b updateBody
	if err := wire.DecodeStrict(body, &b); err != nil {
		return err
	}
	q := r.URL.Query()
	req := &parleyv1.UpdateConversationRequest{
		ConversationId: r.PathValue("id"), AgentId: q.Get("agentId"), VisitorId: q.Get("visitorId"), Status: b.Status,
	}
	if b.Reason != nil {
		req.Reason = *b.Reason
	}
	if raw := bytes.TrimSpace(b.Rating); len(raw) > 0 && string(raw) != "null" {
		n, err := strconv.ParseInt(string(raw), 10, 32)
		if err != nil || n < 1 || n > 5 {
			return apperr.InvalidField("rating", "must be an integer from 1 to 5, not %s", raw)
		}
		v := int32(n)
		req.Rating = &v
	}
	if req.Status == nil && req.Rating == nil {
		return apperr.InvalidField("body", "names no field to update (writable: status, with its reason, and rating)")
	}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, rate, err := h.convs.UpdateAs(r.Context(), h.caller(r), req)
	if err := admitted(w, rate, err); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, summaryJSON(resp.GetConversation()))
	return nil
}

// postMessage is POST /api/v2/conversations/{id}/messages {"text"}: a
// person's reply, signed with the key's name (the gate admitted the key
// with the admin scope).
func (h *Handler) postMessage(w http.ResponseWriter, r *http.Request) error {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return err
	}
	var b struct {
		Text *string `json:"text"`
		// The conversation's createdAt as the caller read it (see
		// readCreatedAt).
		ConversationCreatedAt string `json:"conversationCreatedAt"`
	}
	if err := wire.DecodeStrict(body, &b); err != nil {
		return err
	}
	if b.Text == nil {
		return apperr.InvalidField("text", "required")
	}
	created, err := readCreatedAt("conversationCreatedAt", b.ConversationCreatedAt)
	if err != nil {
		return err
	}
	req := &parleyv1.PostMessageRequest{ConversationId: r.PathValue("id"), Text: *b.Text, ConversationCreateTime: created}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := h.convs.PostMessage(r.Context(), req)
	if err != nil {
		return err
	}
	out := messageJSON(resp.GetMessage())
	out["conversation"] = summaryJSON(resp.GetConversation())
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// watchConversation is GET /api/v2/conversations/{id}/events: a stream of
// the conversation's new messages and status changes (SSE), each with its
// event number as the SSE id; Last-Event-ID (or ?lastEventId=) resumes
// after it. The stream opens with a ": ready" comment, once every event to
// come will be sent, carrying the starting point as its id (a block without
// data: no event), and keeps quiet connections alive with comment lines.
func (h *Handler) watchConversation(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	req := &parleyv1.WatchConversationRequest{ConversationId: r.PathValue("id"), AgentId: q.Get("agentId"), VisitorId: q.Get("visitorId")}
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = q.Get("lastEventId")
	}
	if last != "" {
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			return apperr.InvalidField("lastEventId", "must be an event id received from this stream")
		}
		req.AfterEventId = &n
	}
	if err := h.validate(req); err != nil {
		return err
	}
	watch, rate, err := h.convs.Watch(r.Context(), h.caller(r), req)
	if err := admitted(w, rate, err); err != nil {
		return err
	}
	sse := newSSE(w)
	defer sse.Close()
	ready := false
	err = watch.Run(r.Context(), func(ev *parleyv1.WatchConversationResponse) error {
		var data map[string]any
		switch e := ev.GetEvent().(type) {
		case *parleyv1.WatchConversationResponse_Heartbeat:
			if ready {
				return nil // the stream's own keep-alive comments go out every 15 s
			}
			ready = true
			// The starting point, as the stream's SSE id: a client that
			// received no event before the stream ended (its instance
			// shut down, StreamLife) reconnects with it, possibly to
			// another instance, and misses nothing written meanwhile;
			// with no id it reconnected without Last-Event-ID and began
			// again from the events then to come.
			return sse.Mark("ready", strconv.FormatInt(ev.GetEventId(), 10))
		case *parleyv1.WatchConversationResponse_Message:
			data = map[string]any{"type": "message", "message": messageJSON(e.Message)}
		case *parleyv1.WatchConversationResponse_Status:
			data = map[string]any{"type": "status", "status": e.Status.GetStatus(), "reason": e.Status.GetReason(),
				"changedBy": e.Status.GetChangedBy(), "createdAt": timeJSON(ev.GetCreateTime())}
		default:
			return nil
		}
		id := strconv.FormatInt(ev.GetEventId(), 10)
		data["eventId"] = ev.GetEventId()
		b, err := json.Marshal(data)
		if err != nil {
			return err
		}
		return sse.EventWithID(id, b)
	})
	if err != nil && r.Context().Err() == nil {
		_, body := streamFailed(r, err)
		b, _ := json.Marshal(map[string]any{"type": "error", "error": body.Error})
		_ = sse.Event("", b)
	}
	return nil
}

// readCreatedAt reads the createdAt of the conversation a reply or a
// deletion is meant for, as a summary gives it (RFC 3339): a conversation
// deleted and started again under its id since (another visitor's,
// perhaps) is then refused with 409, nothing done. Empty: none given, the
// conversation of that id. A time RFC 3339 writes but a Timestamp cannot
// hold (year 0000) is refused as Connect refuses it, not taken for
// another conversation's (409).
func readCreatedAt(field, v string) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return nil, apperr.InvalidField(field, "must be the conversation's createdAt (RFC 3339), as its summary gives it")
	}
	ts := timestamppb.New(t)
	if ts.CheckValid() != nil {
		return nil, apperr.InvalidField(field, "must be the conversation's createdAt, a time in the years 1 to 9999")
	}
	return ts, nil
}

func timeJSON(t *timestamppb.Timestamp) string {
	return t.AsTime().UTC().Format(time.RFC3339Nano)
}

// summaryJSON is a conversation summary (SPEC §2.7 and what v2 adds).
func summaryJSON(c *parleyv1.ConversationSummary) map[string]any {
	out := map[string]any{
		"id": c.GetId(), "createdAt": timeJSON(c.GetCreateTime()), "messagesCount": c.GetMessagesCount(),
		"lastMessage": c.GetLastMessage(), "status": c.GetStatus(), "channel": c.GetChannel(), "agentId": c.GetAgentId(),
		"rating": nil, "contact": nil,
	}
	if c.GetUpdateTime() != nil {
		out["updatedAt"] = timeJSON(c.GetUpdateTime())
	}
	if v := c.GetVisitorId(); v != "" {
		out["visitorId"] = v
	}
	if n := c.GetRating(); n != 0 {
		out["rating"] = n
	}
	if ct := c.GetContact(); ct != nil {
		contact := map[string]any{"id": c.GetContactId(), "email": ct.GetEmail(), "phoneNumber": ct.GetPhoneNumber(),
			"firstName": ct.GetFirstName(), "lastName": ct.GetLastName(), "customFields": map[string]any{}}
		if cf := ct.GetCustomFields(); cf != nil {
			contact["customFields"] = cf.AsMap()
		}
		out["contact"] = contact
	}
	if c.GetStatusChangedBy() != "" {
		out["statusReason"] = c.GetStatusReason()
		out["statusChangedBy"] = c.GetStatusChangedBy()
	}
	return out
}

// messageJSON is one message of a conversation.
func messageJSON(m *parleyv1.ConversationMessage) map[string]any {
	sources := make([]map[string]any, 0, len(m.GetSources()))
	for _, s := range m.GetSources() {
		sources = append(sources, wire.SourceJSON(s))
	}
	calls := make([]map[string]any, 0, len(m.GetToolCalls()))
	for _, c := range m.GetToolCalls() {
		calls = append(calls, toolCallJSON(c))
	}
	out := map[string]any{
		"id": m.GetId(), "role": m.GetRole(), "text": m.GetText(), "sources": sources, "toolCalls": calls,
		"createdAt": timeJSON(m.GetCreateTime()),
	}
	if a := m.GetAuthor(); a != "" {
		out["author"] = a
	}
	if x := m.GetModel(); x != "" {
		out["model"] = x
	}
	if m.GetIncomplete() {
		out["incomplete"] = true
	}
	return out
}

// deleteConversation is DELETE /api/v2/conversations/{id} → {id, deleted}.
// ?createdAt= is the conversation's createdAt as the caller read it (see
// readCreatedAt).
func (h *Handler) deleteConversation(w http.ResponseWriter, r *http.Request) error {
	created, err := readCreatedAt("createdAt", r.URL.Query().Get("createdAt"))
	if err != nil {
		return err
	}
	req := &parleyv1.DeleteConversationRequest{ConversationId: r.PathValue("id"), ConversationCreateTime: created}
	return respond(h, w, r, req, h.convs.DeleteConversation, http.StatusOK,
		func(*parleyv1.DeleteConversationResponse) any {
			return map[string]any{"id": req.GetConversationId(), "deleted": true}
		})
}
