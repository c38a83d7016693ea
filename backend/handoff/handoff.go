// Package handoff moves a conversation between its agent's model and the
// organization's people. A conversation is unresolved (the model answers),
// human_requested (people have it: the model is silent, and the visitor's
// messages are answered with the agent's handoff message) or resolved. The
// chat turn asks Silenced; the request_human tool, the API and the console
// change the status here, and the database records each change as a
// conversation event and notifies the streams following it (migration
// 00010, trigger conversations_status_event).
//
// It must never change a conversation of another organization: every
// function takes the organization and runs in its tenant transaction.
package handoff

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/conversation/view"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/webhook"
)

// A conversation's statuses.
const (
	// Unresolved: the model answers (every conversation starts so).
	Unresolved = "unresolved"
	// HumanRequested: people have the conversation; the model is silent.
	HumanRequested = "human_requested"
	// Resolved: done; the model answers if the visitor writes again.
	Resolved = "resolved"
)

// Statuses are the statuses a conversation can have.
var Statuses = []string{Unresolved, Resolved, HumanRequested}

// IsStatus reports whether s is one of Statuses.
func IsStatus(s string) bool {
	for _, x := range Statuses {
		if s == x {
			return true
		}
	}
	return false
}

// DefaultMessage answers a visitor while people have the conversation, for
// an agent without its own handoff message.
const DefaultMessage = "A person will answer here shortly."

// Message is what the visitor reads while people have the conversation:
// the agent's handoff message, or DefaultMessage.
func Message(agentMessage string) string {
	if strings.TrimSpace(agentMessage) == "" {
		return DefaultMessage
	}
	return agentMessage
}

// Silenced reports whether the model stays silent in a conversation with
// this status.
func Silenced(status string) bool { return status == HumanRequested }

// ByAgent is the changed_by of a change the agent's model made (the
// request_human tool).
const ByAgent = "agent"

// ErrNotFound: the organization has no conversation with that id (it may
// have been deleted, with its agent, since the caller read it): 404.
var ErrNotFound = apperr.New(apperr.NotFound, "the conversation no longer exists")

// SetStatus gives a conversation of org a new status, recording why and who
// (a key's name, a member's email, ByAgent); changed is false when it
// already had that status (nothing is recorded then). tx must be org's
// tenant transaction (db.Store.TenantTx). ErrNotFound when org has no such
// conversation. A change to human_requested or resolved is the webhook
// event conversation.human_requested or conversation.resolved (its data the
// conversation's summary), emitted by hooks in tx: sent only if tx commits.
func SetStatus(ctx context.Context, tx pgx.Tx, hooks *webhook.Emitter, org uuid.UUID, conversationID, status, reason, by string) (changed bool, err error) {
	q := dbq.New(tx)
	_, err = q.SetConversationStatus(ctx, dbq.SetConversationStatusParams{
		OrgID: org, ID: conversationID, Status: status, Reason: reason, ChangedBy: by,
	})
	if err == nil {
		return true, emitStatus(ctx, tx, q, hooks, org, conversationID, status)
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, err
	}
	if _, err := q.GetConversation(ctx, dbq.GetConversationParams{OrgID: org, ID: conversationID}); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return false, ErrNotFound
		}
		return false, err
	}
	return false, nil
}

// emitStatus emits the webhook event of a conversation's new status, if it
// has one (unresolved has none).
func emitStatus(ctx context.Context, tx pgx.Tx, q *dbq.Queries, hooks *webhook.Emitter, org uuid.UUID, conversationID, status string) error {
	event := map[string]string{HumanRequested: webhook.ConversationHumanRequested, Resolved: webhook.ConversationResolved}[status]
	if event == "" {
		return nil
	}
	return hooks.Emit(ctx, tx, org, event, func() (proto.Message, error) {
		return view.OrgSummary(ctx, q, org, conversationID)
	})
}

// RequestHuman hands a conversation of org to people, as the request_human
// tool does: its status becomes human_requested (changed by ByAgent, with
// the model's reason), the change is recorded and the streams following the
// conversation are notified when tx commits, and hooks emits
// conversation.human_requested. From then on the model is not called for
// it until a person resolves it or gives it back. changed is false when
// people already had it.
func RequestHuman(ctx context.Context, tx pgx.Tx, hooks *webhook.Emitter, org uuid.UUID, conversationID, reason string) (changed bool, err error) {
	return SetStatus(ctx, tx, hooks, org, conversationID, HumanRequested, reason, ByAgent)
}
