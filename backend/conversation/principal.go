package conversation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// Reads for a principal of the organization (a console member): unlike
// List, they do not admit by key or visitor. The caller has decided the
// principal may read its organization's conversations; every query is
// scoped to the principal's organization.

// MaxTranscript bounds the messages a transcript shows.
const MaxTranscript = 1000

// Statuses a conversation can have.
var Statuses = []string{"unresolved", "resolved", "human_requested"}

// Filter narrows ListForPrincipal.
type Filter struct {
	AgentID string
	// Status is one of Statuses, or empty for all.
	Status string
	// VisitorID is one visitor's conversations, or empty for all.
	VisitorID string
	// Cursor is the Next of the previous page, or empty for the first.
	Cursor string
	// Limit is the page size; 0 means MaxLimit, at most MaxLimit.
	Limit int32
}

// Page is one page of conversations, newest first.
type Page struct {
	Conversations []*parleyv1.ConversationSummary
	// Next is the cursor of the following page; empty on the last one.
	Next string
}

func cursorOf(t time.Time, id string) string {
	return strconv.FormatInt(t.UnixMicro(), 10) + "_" + id
}

func parseCursor(c string) (time.Time, string, error) {
	us, id, ok := strings.Cut(c, "_")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", apperr.InvalidField("cursor", "not a cursor of this listing")
	}
	return time.UnixMicro(n), id, nil
}

// agentOf loads one of org's agents, or explains its absence (another
// organization's agent is Forbidden, as on the API).
func agentOf(ctx context.Context, q *dbq.Queries, org uuid.UUID, raw string) (dbq.Agent, error) {
	id, err := uuid.Parse(raw)
	if err != nil {
		return dbq.Agent{}, apperr.New(apperr.NotFound, "agent %q not found", raw)
	}
	a, err := q.GetAgent(ctx, dbq.GetAgentParams{OrgID: org, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return a, db.Missing(ctx, q, "agent", "agent", id)
	}
	return a, err
}

// ListForPrincipal lists one of the principal's organization's agents'
// conversations, newest first.
func (s *Service) ListForPrincipal(ctx context.Context, f Filter) (*Page, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	params := dbq.ConsoleListConversationsParams{OrgID: p.OrgID, MaxRows: f.Limit}
	if f.Limit <= 0 || f.Limit > MaxLimit {
		params.MaxRows = MaxLimit
	}
	limit := params.MaxRows
	params.MaxRows++ // one more tells whether a next page exists
	if f.Status != "" {
		if !isStatus(f.Status) {
			return nil, apperr.InvalidField("status", "must be one of %s", strings.Join(Statuses, ", "))
		}
		params.Status = &f.Status
	}
	if f.VisitorID != "" {
		if utf8.RuneCountInString(f.VisitorID) > 200 {
			return nil, apperr.InvalidField("visitorId", "at most 200 characters")
		}
		params.VisitorID = &f.VisitorID
	}
	if f.Cursor != "" {
		t, id, err := parseCursor(f.Cursor)
		if err != nil {
			return nil, err
		}
		params.BeforeTime, params.BeforeID = &t, &id
	}
	out := &Page{Conversations: []*parleyv1.ConversationSummary{}}
	// SECURITY: the principal's organization scopes the agent and the
	// listing (tenant transaction and explicit org_id filters).
	err = s.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		a, err := agentOf(ctx, q, p.OrgID, f.AgentID)
		if err != nil {
			return err
		}
		params.AgentID = a.ID
		rows, err := q.ConsoleListConversations(ctx, params)
		if err != nil {
			return err
		}
		for i, r := range rows {
			if int32(i) == limit {
				last := rows[i-1]
				out.Next = cursorOf(last.CreatedAt, last.ID)
				break
			}
			out.Conversations = append(out.Conversations, &parleyv1.ConversationSummary{
				Id: r.ID, CreateTime: timestamppb.New(r.CreatedAt), MessagesCount: r.MessagesCount,
				LastMessage: r.LastMessage, Status: r.Status, VisitorId: deref(r.VisitorID), Channel: r.Channel,
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func isStatus(s string) bool {
	for _, x := range Statuses {
		if s == x {
			return true
		}
	}
	return false
}

// Message is one message of a transcript.
type Message struct {
	ID         string
	Role       string
	Content    string
	CreateTime time.Time
	// Sources are the passages an answer was made from.
	Sources []*parleyv1.Source
	// Model, Provider and Latency are set on answers.
	Model, Provider string
	Latency         *time.Duration
	// PromptTokens and CompletionTokens are set on answers.
	PromptTokens, CompletionTokens *int32
	// Incomplete marks an answer cut short.
	Incomplete bool
}

// Transcript is a conversation and its messages, oldest first.
type Transcript struct {
	Conversation *parleyv1.ConversationSummary
	AgentID      string
	Messages     []Message
	// Truncated is set when the conversation has more than MaxTranscript
	// messages (the first ones are shown).
	Truncated bool
}

// TranscriptForPrincipal returns one of the principal's organization's
// conversations. Another organization's conversation is not found: ids are
// the clients' own and only unique within an organization.
func (s *Service) TranscriptForPrincipal(ctx context.Context, id string) (*Transcript, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	var out *Transcript
	// SECURITY: the conversation and its messages are read by the
	// principal's organization (tenant transaction and explicit org_id).
	err = s.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		c, err := q.GetConversation(ctx, dbq.GetConversationParams{OrgID: p.OrgID, ID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.New(apperr.NotFound, "conversation %q not found", id)
		}
		if err != nil {
			return err
		}
		rows, err := q.ConsoleTranscript(ctx, dbq.ConsoleTranscriptParams{OrgID: p.OrgID, ConversationID: c.ID, MaxRows: MaxTranscript + 1})
		if err != nil {
			return err
		}
		out = &Transcript{
			Conversation: &parleyv1.ConversationSummary{
				Id: c.ID, CreateTime: timestamppb.New(c.CreatedAt), MessagesCount: int64(len(rows)),
				Status: c.Status, VisitorId: deref(c.VisitorID), Channel: c.Channel,
			},
			AgentID: c.AgentID.String(),
		}
		if len(rows) > MaxTranscript {
			rows, out.Truncated = rows[:MaxTranscript], true
		}
		for _, r := range rows {
			m := Message{
				ID: r.ID.String(), Role: r.Role, Content: r.Content, CreateTime: r.CreatedAt,
				Model: deref(r.Model), Provider: deref(r.Provider), PromptTokens: r.PromptTokens,
				CompletionTokens: r.CompletionTokens, Incomplete: r.Incomplete,
			}
			if r.LatencyMs != nil {
				d := time.Duration(*r.LatencyMs) * time.Millisecond
				m.Latency = &d
			}
			if m.Sources, err = sourcesOf(r.Sources); err != nil {
				// A message stays readable without its sources.
				slog.WarnContext(ctx, "unreadable message sources", "message", r.ID, "err", err)
			}
			out.Messages = append(out.Messages, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// sourcesOf reads a message's sources column (a JSON array of Source, as
// chat writes it).
func sourcesOf(raw []byte) ([]*parleyv1.Source, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	out := make([]*parleyv1.Source, 0, len(items))
	for i, it := range items {
		s := &parleyv1.Source{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(it, s); err != nil {
			return out, fmt.Errorf("source %d: %w", i, err)
		}
		out = append(out, s)
	}
	return out, nil
}
