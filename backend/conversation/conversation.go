// Package conversation is ConversationService: an agent's conversations, as
// their owner or a public agent's visitor may see them.
package conversation

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/chat"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/ratelimit"
)

// DefaultLimit and MaxLimit bound a listing (SPEC §4.2).
const (
	DefaultLimit = 10
	MaxLimit     = 50
)

// Service lists conversations.
type Service struct {
	Admit *chat.Admitter
	Store *db.Store
}

var _ parleyv1connect.ConversationServiceHandler = (*Service)(nil)

// List admits the caller like chat does and lists the agent's conversations,
// newest first: a visitor without a key sees only its own; a key of the
// organization sees all of them, or one visitor's. The Admitted is returned
// for its rate-limit state, also with an error.
func (s *Service) List(ctx context.Context, c chat.Caller, req *parleyv1.ListConversationsRequest) (*parleyv1.ListConversationsResponse, *chat.Admitted, error) {
	adm, err := s.Admit.Admit(ctx, c, req.GetAgentId(), req.GetVisitorId())
	if err != nil {
		return nil, adm, err
	}
	limit := req.GetLimit()
	if limit == 0 {
		limit = DefaultLimit
	}
	var visitor *string
	if v := req.GetVisitorId(); v != "" {
		visitor = &v
	}
	out := &parleyv1.ListConversationsResponse{Conversations: []*parleyv1.ConversationSummary{}}
	err = s.Store.Tenant(ctx, adm.OrgID(), func(q *dbq.Queries) error {
		rows, err := q.ListConversations(ctx, dbq.ListConversationsParams{
			OrgID: adm.OrgID(), AgentID: adm.Agent.ID, VisitorID: visitor, MaxRows: limit,
		})
		for _, r := range rows {
			out.Conversations = append(out.Conversations, &parleyv1.ConversationSummary{
				Id: r.ID, CreateTime: timestamppb.New(r.CreatedAt), MessagesCount: r.MessagesCount,
				LastMessage: r.LastMessage, Status: r.Status, VisitorId: deref(r.VisitorID), Channel: r.Channel,
			})
		}
		return err
	})
	return out, adm, err
}

// ListConversations implements ConversationService.
func (s *Service) ListConversations(ctx context.Context, req *parleyv1.ListConversationsRequest) (*parleyv1.ListConversationsResponse, error) {
	info, _ := connect.CallInfoForHandlerContext(ctx)
	resp, adm, err := s.List(ctx, chat.CallerOf(info.RequestHeader(), info.Peer().Addr), req)
	var rate *ratelimit.Result
	if adm != nil {
		rate = adm.Rate
	}
	if err != nil {
		return nil, chat.ConnectError(ctx, err, rate)
	}
	ratelimit.WriteHeaders(info.ResponseHeader(), rate, time.Now())
	return resp, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
