// Package conversation is ConversationService: an organization's
// conversations as its keys, its console members and its public agents'
// visitors may see them; their ratings; their handoff between the model
// and people (status, people's replies); and streams of their events, live
// across instances (Hub).
//
// It must never show or change a conversation to a party other than its
// organization's (or, for a public agent's visitor, other than the
// visitor's own), and it reports every such id as not found.
package conversation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/chat"
	"github.com/parleyhq/parley/backend/db"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/backend/webhook"
)

// DefaultLimit and MaxLimit bound a listing (SPEC §4.2).
const (
	DefaultLimit = 10
	MaxLimit     = 50
)

// Service reads, changes and streams conversations.
type Service struct {
	// Admit admits keys and public agents' visitors, as chat does.
	Admit *chat.Admitter
	Store *db.Store
	// Live wakes streams when their conversation has new events; nil: no
	// streams (WatchConversation is Unavailable).
	Live *Hub
	// Drain ends when the server begins to shut down: streams end at
	// once, and their clients reconnect (to another instance) where they
	// left off.
	Drain context.Context
	// Hooks emits the webhook events of status changes and people's
	// replies; nil: none.
	Hooks *webhook.Emitter
	// Heartbeat is how often a quiet stream says it is alive; 0 means
	// HeartbeatEvery.
	Heartbeat time.Duration
	// StreamLife is how long a stream stays open; 0 means StreamLife.
	StreamLife time.Duration
	// OrgStreams bounds the streams one organization's keys hold open on
	// this instance at once (DefaultOrgStreams in the server); 0 or less:
	// no bound. A visitor's are bounded by address instead
	// (MaxVisitorStreams).
	OrgStreams int

	streams slots // open streams: visitors' by agent and address, keys' by organization
}

var _ parleyv1connect.ConversationServiceHandler = (*Service)(nil)

// List admits the caller and lists conversations, newest first: with a key,
// the organization's (one agent's with agent_id); without one, a public
// agent's visitor's own (agent_id and visitor_id required). It returns the
// rate-limit state to report, also with an error.
func (s *Service) List(ctx context.Context, c chat.Caller, req *parleyv1.ListConversationsRequest) (*parleyv1.ListConversationsResponse, *ratelimit.Result, error) {
	p, err := s.AdmitCaller(ctx, c, req.GetAgentId(), req.GetVisitorId())
	if err != nil {
		return nil, rateOf(p), err
	}
	limit := req.GetLimit()
	if limit == 0 {
		limit = DefaultLimit
	}
	f := Filter{
		AgentID: req.GetAgentId(), Status: req.GetStatus(), VisitorID: req.GetVisitorId(), Channel: req.GetChannel(),
		Cursor: req.GetCursor(), Limit: limit,
	}
	if req.GetSince() != nil {
		// A binary Timestamp can hold any seconds; Postgres refuses a time
		// beyond its range (4713 BC to 294276 AD). CheckValid keeps to the
		// years 1 to 9999, well within.
		if err := req.GetSince().CheckValid(); err != nil {
			return nil, p.Rate, apperr.InvalidField("since", "must be a time in the years 1 to 9999")
		}
		t := req.GetSince().AsTime()
		f.Since = &t
	}
	page, err := s.Find(ctx, p, f)
	if err != nil {
		return nil, p.Rate, err
	}
	return &parleyv1.ListConversationsResponse{Conversations: page.Conversations, NextCursor: page.Next}, p.Rate, nil
}

// Get admits the caller and returns one of its conversations with its
// messages.
func (s *Service) Get(ctx context.Context, c chat.Caller, req *parleyv1.GetConversationRequest) (*parleyv1.GetConversationResponse, *ratelimit.Result, error) {
	p, err := s.AdmitCaller(ctx, c, req.GetAgentId(), req.GetVisitorId())
	if err != nil {
		return nil, rateOf(p), err
	}
	t, err := s.Transcript(ctx, p, req.GetConversationId())
	if err != nil {
		return nil, p.Rate, err
	}
	out := &parleyv1.GetConversationResponse{
		Conversation: t.Conversation, Truncated: t.Truncated, LastEventId: t.LastEventID,
		Messages: make([]*parleyv1.ConversationMessage, 0, len(t.Messages)),
	}
	for _, m := range t.Messages {
		out.Messages = append(out.Messages, m.Proto())
	}
	return out, p.Rate, nil
}

// UpdateAs admits the caller and changes one of its conversations: a
// visitor or a chat key may rate it; a status needs the admin scope.
func (s *Service) UpdateAs(ctx context.Context, c chat.Caller, req *parleyv1.UpdateConversationRequest) (*parleyv1.UpdateConversationResponse, *ratelimit.Result, error) {
	p, err := s.AdmitCaller(ctx, c, req.GetAgentId(), req.GetVisitorId())
	if err != nil {
		return nil, rateOf(p), err
	}
	sum, err := s.Update(ctx, p, req.GetConversationId(), Change{Status: req.Status, Rating: req.Rating, Reason: req.GetReason()})
	if err != nil {
		return nil, p.Rate, err
	}
	return &parleyv1.UpdateConversationResponse{Conversation: sum}, p.Rate, nil
}

// Watch admits the caller and opens a stream of one of its conversations'
// events (Follow).
func (s *Service) Watch(ctx context.Context, c chat.Caller, req *parleyv1.WatchConversationRequest) (*Watch, *ratelimit.Result, error) {
	p, err := s.AdmitCaller(ctx, c, req.GetAgentId(), req.GetVisitorId())
	if err != nil {
		return nil, rateOf(p), err
	}
	release := func() {}
	switch {
	case p.IsVisitor():
		// SECURITY: a visitor's streams are bounded by address (streams.go).
		if release, err = s.streams.take(visitorKey(p.Agent, c.ClientIP), MaxVisitorStreams,
			"too many streams open from this address; close one, or retry later"); err != nil {
			return nil, p.Rate, err
		}
	case s.OrgStreams > 0:
		// SECURITY: a key's by its organization (DefaultOrgStreams).
		if release, err = s.streams.take(orgKey(p.Org), s.OrgStreams, fmt.Sprintf(
			"this organization's keys already hold %d conversation streams open on this server, its limit; close one, or retry later", s.OrgStreams)); err != nil {
			return nil, p.Rate, err
		}
	}
	w, err := s.Follow(ctx, p, req.GetConversationId(), req.AfterEventId)
	if err != nil {
		release()
		return nil, p.Rate, err
	}
	w.release = release
	return w, p.Rate, nil
}

func rateOf(p *Party) *ratelimit.Result {
	if p == nil {
		return nil
	}
	return p.Rate
}

// callerOf is the caller of a Connect call.
func callerOf(ctx context.Context) chat.Caller {
	info, _ := connect.CallInfoForHandlerContext(ctx)
	return chat.CallerOf(info.RequestHeader(), info.Peer().Addr)
}

// reply ends a Connect call: the rate-limit headers, or the error carrying
// them.
func reply[T any](ctx context.Context, resp T, rate *ratelimit.Result, err error) (T, error) {
	if err != nil {
		var zero T
		return zero, chat.ConnectError(ctx, err, rate)
	}
	if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
		ratelimit.WriteHeaders(info.ResponseHeader(), rate, time.Now())
	}
	return resp, nil
}

// ListConversations implements ConversationService.
func (s *Service) ListConversations(ctx context.Context, req *parleyv1.ListConversationsRequest) (*parleyv1.ListConversationsResponse, error) {
	resp, rate, err := s.List(ctx, callerOf(ctx), req)
	return reply(ctx, resp, rate, err)
}

// GetConversation implements ConversationService.
func (s *Service) GetConversation(ctx context.Context, req *parleyv1.GetConversationRequest) (*parleyv1.GetConversationResponse, error) {
	resp, rate, err := s.Get(ctx, callerOf(ctx), req)
	return reply(ctx, resp, rate, err)
}

// UpdateConversation implements ConversationService.
func (s *Service) UpdateConversation(ctx context.Context, req *parleyv1.UpdateConversationRequest) (*parleyv1.UpdateConversationResponse, error) {
	resp, rate, err := s.UpdateAs(ctx, callerOf(ctx), req)
	return reply(ctx, resp, rate, err)
}

// PostMessage implements ConversationService; the gate admitted the key
// (the admin scope) and put it in ctx, as for the REST path.
func (s *Service) PostMessage(ctx context.Context, req *parleyv1.PostMessageRequest) (*parleyv1.PostMessageResponse, error) {
	p, err := keyParty(ctx)
	if err != nil {
		return nil, err
	}
	read, err := readTime(req.GetConversationCreateTime())
	if err != nil {
		return nil, err
	}
	m, sum, err := s.Reply(ctx, p, req.GetConversationId(), read, req.GetText(), "api")
	if err != nil {
		return nil, err
	}
	return &parleyv1.PostMessageResponse{Message: m.Proto(), Conversation: sum}, nil
}

// DeleteConversation implements ConversationService.
func (s *Service) DeleteConversation(ctx context.Context, req *parleyv1.DeleteConversationRequest) (*parleyv1.DeleteConversationResponse, error) {
	p, err := keyParty(ctx)
	if err != nil {
		return nil, err
	}
	read, err := readTime(req.GetConversationCreateTime())
	if err != nil {
		return nil, err
	}
	if err := s.Delete(ctx, p, req.GetConversationId(), read); err != nil {
		return nil, err
	}
	return &parleyv1.DeleteConversationResponse{}, nil
}

// WatchConversation implements ConversationService.
func (s *Service) WatchConversation(ctx context.Context, req *parleyv1.WatchConversationRequest, stream *connect.ServerStream[parleyv1.WatchConversationResponse]) error {
	conn := stream.Conn()
	w, rate, err := s.Watch(ctx, chat.CallerOf(conn.RequestHeader(), conn.Peer().Addr), req)
	if err != nil {
		return chat.ConnectError(ctx, err, rate)
	}
	ratelimit.WriteHeaders(stream.ResponseHeader(), rate, time.Now())
	if err := w.Run(ctx, stream.Send); err != nil {
		return chat.ConnectError(ctx, err, nil)
	}
	// Run ends quietly when the request does; a deadline the client set
	// (grpc-timeout, Connect-Timeout-Ms) must still end the stream
	// deadline_exceeded, not OK as a drain or the stream's life does.
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return chat.ConnectError(ctx, ctx.Err(), nil)
	}
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// readTime is the creation time of the conversation a caller read, which
// a reply or a deletion carries (conversation_create_time, see
// sameConversation); zero when it carries none. A binary Timestamp can
// hold any seconds and nanos: one outside the years 1 to 9999 (or with
// nanos out of range) names no conversation's time and is Invalid, as
// Connect's JSON and the REST paths refuse it, not a conversation
// "deleted and started again" (409).
func readTime(t *timestamppb.Timestamp) (time.Time, error) {
	if t == nil {
		return time.Time{}, nil
	}
	if err := t.CheckValid(); err != nil {
		return time.Time{}, apperr.InvalidField("conversation_create_time", "must be a time in the years 1 to 9999")
	}
	return t.AsTime(), nil
}
