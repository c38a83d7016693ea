// Package view is how the API shows a conversation and its messages: the
// summary and the message that ConversationService returns, and that the
// webhook events of conversations carry as their data. It is its own
// package so that chat, handoff and the tools (which the conversation
// package imports) build the same JSON without an import cycle.
//
// It reads nothing of its own accord: Summary runs in the caller's tenant
// transaction and names the organization.
package view

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// Audience is who reads a conversation, which decides what its summary
// shows.
type Audience int

const (
	// Visitor is a public agent's visitor: not its contact, nor why the
	// status last changed or who changed it (a member's email, a key's
	// name, a free-text reason are the organization's own notes).
	Visitor Audience = iota
	// Organization is a key of the organization without the admin scope
	// (a chat key, made for a website widget and so perhaps in a page):
	// who and why, but not the contact's details, which the Contacts API
	// keeps to the admin scope.
	Organization
	// Manager is a key with the admin scope, a console member, a webhook
	// endpoint: everything.
	Manager
)

// SummaryOf is a conversation's summary as who reads it.
func SummaryOf(ctx context.Context, r dbq.SearchConversationsRow, who Audience) *parleyv1.ConversationSummary {
	out := &parleyv1.ConversationSummary{
		Id: r.ID, CreateTime: timestamppb.New(r.CreatedAt), UpdateTime: timestamppb.New(r.UpdatedAt),
		MessagesCount: r.MessagesCount, LastMessage: r.LastMessage, Status: r.Status, VisitorId: deref(r.VisitorID),
		Channel: r.Channel, AgentId: r.AgentID.String(),
	}
	if r.Rating != nil {
		out.Rating = int32(*r.Rating)
	}
	if who == Visitor {
		return out
	}
	// SECURITY: who and why only for the organization, the contact only
	// for those who may read contacts.
	out.StatusReason, out.StatusChangedBy = r.StatusReason, r.StatusBy
	if r.ContactID != nil && who == Manager {
		out.ContactId = r.ContactID.String()
		out.Contact = &parleyv1.Contact{
			Email: deref(r.ContactEmail), PhoneNumber: deref(r.ContactPhoneNumber),
			FirstName: deref(r.ContactFirstName), LastName: deref(r.ContactLastName),
		}
		if len(r.ContactCustomFields) > 0 && string(r.ContactCustomFields) != "{}" {
			cf := &structpb.Struct{}
			if err := protojson.Unmarshal(r.ContactCustomFields, cf); err != nil {
				slog.WarnContext(ctx, "unreadable contact custom fields", "conversation", r.ID, "err", err)
			} else {
				out.Contact.CustomFields = cf
			}
		}
	}
	return out
}

// Summary reads one of org's conversations' summary in q's transaction
// (org's tenant transaction), and its latest event number. pgx.ErrNoRows
// when org has no such conversation.
func Summary(ctx context.Context, q *dbq.Queries, org uuid.UUID, id string, who Audience) (*parleyv1.ConversationSummary, int64, error) {
	// SECURITY: named by org, in org's tenant transaction.
	r, err := q.ConversationSummary(ctx, dbq.ConversationSummaryParams{OrgID: org, ID: id})
	if err != nil {
		return nil, 0, err
	}
	return SummaryOf(ctx, dbq.SearchConversationsRow{
		ID: r.ID, AgentID: r.AgentID, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Status: r.Status,
		VisitorID: r.VisitorID, Channel: r.Channel, Rating: r.Rating, StatusReason: r.StatusReason,
		StatusBy: r.StatusBy, ContactID: r.ContactID, MessagesCount: r.MessagesCount, LastMessage: r.LastMessage,
		ContactEmail: r.ContactEmail, ContactPhoneNumber: r.ContactPhoneNumber, ContactFirstName: r.ContactFirstName,
		ContactLastName: r.ContactLastName, ContactCustomFields: r.ContactCustomFields,
	}, who), r.EventSeq, nil
}

// OrgSummary is Summary as the organization itself sees it (its contact
// included), for the data of webhook events.
func OrgSummary(ctx context.Context, q *dbq.Queries, org uuid.UUID, id string) (*parleyv1.ConversationSummary, error) {
	s, _, err := Summary(ctx, q, org, id, Manager)
	return s, err
}

// Message is one message of a conversation.
type Message struct {
	ID string
	// ConversationID is the conversation it belongs to.
	ConversationID string
	Role           string
	Content        string
	CreateTime     time.Time
	// Author is who wrote a person's reply (role human).
	Author string
	// Sources are the passages an answer was made from.
	Sources []*parleyv1.Source
	// ToolCalls are the tools the model called for an answer.
	ToolCalls []*parleyv1.ToolCall
	// Model, Provider and Latency are set on answers.
	Model, Provider string
	Latency         *time.Duration
	// PromptTokens and CompletionTokens are set on answers.
	PromptTokens, CompletionTokens *int32
	// Incomplete marks an answer cut short.
	Incomplete bool
}

// Proto is the message as the API returns it.
func (m Message) Proto() *parleyv1.ConversationMessage {
	return &parleyv1.ConversationMessage{
		Id: m.ID, ConversationId: m.ConversationID, Role: m.Role, Text: m.Content, Author: m.Author,
		Sources: m.Sources, ToolCalls: m.ToolCalls,
		CreateTime: timestamppb.New(m.CreateTime), Model: m.Model, Incomplete: m.Incomplete,
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
