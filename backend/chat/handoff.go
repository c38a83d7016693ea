package chat

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/conversation/view"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/handoff"
)

// answerForPeople is the turn of a conversation people have taken over
// (status human_requested, see backend/handoff): the model is not called.
// The visitor's message, stored by load, waits for a person; the turn
// answers with the agent's handoff message, stored as the answer and
// marked metadata.handoff, as a reply or as a stream (a token, then done).
// A person's reply reaches the visitor through the conversation's event
// stream (GET /v2/conversations/{id}/events).
func (s *Service) answerForPeople(ctx context.Context, t *turn) (*parleyv1.ChatResponse, error) {
	text := handoff.Message(t.a.Agent.HandoffMessage)
	resp := &parleyv1.ChatResponse{
		Answer: text, ConversationId: t.conv.ID, VisitorId: t.req.GetVisitorId(), Sources: []*parleyv1.Source{},
		Usage:    &parleyv1.Usage{},
		Metadata: &parleyv1.ChatMetadata{LatencyMs: t.now().Sub(t.start).Milliseconds(), Handoff: true},
	}
	storeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	err := s.Store.TenantTx(storeCtx, t.org, func(tx pgx.Tx, q *dbq.Queries) error {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		resp.MessageId = id.String()
		// Only in the conversation the question went to: one deleted
		// meanwhile and started again under its id is another's.
		row, err := q.CreateTurnMessage(storeCtx, dbq.CreateTurnMessageParams{
			OrgID: t.org, ID: id, ConversationID: t.conv.ID, ConversationCreatedAt: t.conv.CreatedAt,
			Content: text, Channel: t.channel,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return errConversationGone
		}
		if err != nil {
			return err
		}
		return s.emitMessage(storeCtx, tx, t.org, view.Message{
			ID: row.ID.String(), ConversationID: t.conv.ID, Role: "assistant", Content: text, CreateTime: row.CreatedAt,
		})
	})
	if err != nil {
		return nil, err
	}
	if err := t.send(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Token{Token: text}}); err != nil {
		return nil, err
	}
	return t.finish(ctx, resp, generation{})
}
