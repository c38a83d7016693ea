package conversation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/conversation/view"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/handoff"
	"github.com/parleyhq/parley/backend/page"
)

// Reads for a party: a principal of the organization (an API key, a console
// member) or a public agent's visitor. Every query is scoped to the party's
// organization, and a visitor's to its agent and visitor id.

// MaxTranscript bounds the messages a transcript shows, and
// MaxTranscriptBytes their text: the messages shown start within its
// first MaxTranscriptBytes. A visitor's read needs no key, and a thousand
// answers of 32 KB each made every read of the transcript 32 MB, held
// several times over while it was encoded.
const (
	MaxTranscript      = 1000
	MaxTranscriptBytes = 2 << 20
)

// Statuses a conversation can have.
var Statuses = handoff.Statuses

// Filter narrows a listing.
type Filter struct {
	// AgentID is one agent's conversations, or empty for all the
	// organization's.
	AgentID string
	// Status is one of Statuses, or empty for all.
	Status string
	// VisitorID is one visitor's conversations, or empty for all.
	VisitorID string
	// Channel is one channel's conversations, or empty for all.
	Channel string
	// Since keeps the conversations active (a message, a status change) at
	// or after it, when set.
	Since *time.Time
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

// ListForPrincipal lists the conversations of the principal's organization
// (a console member's), newest first.
func (s *Service) ListForPrincipal(ctx context.Context, f Filter) (*Page, error) {
	p, err := MemberParty(ctx, "")
	if err != nil {
		return nil, err
	}
	return s.Find(ctx, p, f)
}

// Find lists the party's conversations, newest first. A visitor's listing
// is always its own conversations with its agent.
func (s *Service) Find(ctx context.Context, p *Party, f Filter) (*Page, error) {
	limit := page.Size(f.Limit, MaxLimit, MaxLimit)
	params := dbq.SearchConversationsParams{OrgID: p.Org, MaxRows: limit + 1}
	if f.Status != "" {
		if !handoff.IsStatus(f.Status) {
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
	if f.Channel != "" {
		params.Channel = &f.Channel
	}
	params.Since = f.Since
	if f.Cursor != "" {
		t, id, err := page.Parse(f.Cursor)
		if err != nil {
			return nil, err
		}
		params.BeforeTime, params.BeforeID = &t, &id
	}
	if p.IsVisitor() {
		// SECURITY: a visitor lists its own conversations with its agent.
		// The agent's id as the visitor was admitted by it, in any form
		// uuid.Parse reads (upper case, braces), as chat takes it.
		if id, err := uuid.Parse(f.AgentID); f.AgentID != "" && (err != nil || id != p.Agent) {
			return nil, apperr.New(apperr.NotFound, "agent %q not found", f.AgentID)
		}
		params.AgentID, params.VisitorID = &p.Agent, &p.Visitor
	}
	out := &Page{Conversations: []*parleyv1.ConversationSummary{}}
	// SECURITY: the party's organization scopes the agent and the listing
	// (tenant transaction and explicit org_id filters).
	err := s.Store.Tenant(ctx, p.Org, func(q *dbq.Queries) error {
		if f.AgentID != "" && params.AgentID == nil {
			a, err := agentOf(ctx, q, p.Org, f.AgentID)
			if err != nil {
				return err
			}
			params.AgentID = &a.ID
		}
		rows, err := q.SearchConversations(ctx, params)
		if err != nil {
			return err
		}
		rows, out.Next = page.Cut(rows, limit, func(r dbq.SearchConversationsRow) (time.Time, string) { return r.CreatedAt, r.ID })
		for _, r := range rows {
			out.Conversations = append(out.Conversations, summaryOf(ctx, r, p.audience()))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// summaryOf is a conversation's summary (view.SummaryOf).
var summaryOf = view.SummaryOf

// summary reads one conversation's summary in q's transaction, and its
// latest event number.
func summary(ctx context.Context, q *dbq.Queries, p *Party, id string) (*parleyv1.ConversationSummary, int64, error) {
	s, seq, err := view.Summary(ctx, q, p.Org, id, p.audience())
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, notFound(id)
	}
	return s, seq, err
}

// Message is one message of a transcript (view.Message).
type Message = view.Message

// Transcript is a conversation and its messages, oldest first.
type Transcript struct {
	Conversation *parleyv1.ConversationSummary
	AgentID      string
	Messages     []Message
	// Truncated is set when the conversation has more messages than
	// MaxTranscript and MaxTranscriptBytes let show (the first ones are
	// shown, or the latest for TranscriptForPrincipal).
	Truncated bool
	// LastEventID is the number of the conversation's latest event.
	LastEventID int64
}

// TranscriptForPrincipal returns one of the principal's organization's
// conversations (a console member's), with its latest messages when it has
// more than a transcript shows: the console is where people answer the
// visitor, and the first ones would hide what the visitor writes next.
// Another organization's conversation is not found: ids are the clients'
// own and only unique within an organization.
func (s *Service) TranscriptForPrincipal(ctx context.Context, id string) (*Transcript, error) {
	p, err := MemberParty(ctx, "")
	if err != nil {
		return nil, err
	}
	return s.transcript(ctx, p, id, true)
}

// Transcript returns one of the party's conversations and its messages
// (the first ones, when it has more than a transcript shows).
func (s *Service) Transcript(ctx context.Context, p *Party, id string) (*Transcript, error) {
	return s.transcript(ctx, p, id, false)
}

// transcript reads the conversation and its first messages, or its latest.
func (s *Service) transcript(ctx context.Context, p *Party, id string, latest bool) (*Transcript, error) {
	var out *Transcript
	// SECURITY: the conversation and its messages are read by the party's
	// organization (tenant transaction and explicit org_id), and must be
	// the party's own (Party.own).
	err := s.Store.Tenant(ctx, p.Org, func(q *dbq.Queries) error {
		c, err := p.own(ctx, q, id)
		if err != nil {
			return err
		}
		sum, seq, err := summary(ctx, q, p, c.ID)
		if err != nil {
			return err
		}
		var rows []dbq.ConsoleTranscriptRow
		if latest {
			last, err := q.LatestTranscript(ctx, dbq.LatestTranscriptParams{OrgID: p.Org, ConversationID: c.ID, MaxRows: MaxTranscript, MaxBytes: MaxTranscriptBytes})
			if err != nil {
				return err
			}
			for _, r := range last {
				rows = append(rows, dbq.ConsoleTranscriptRow(r))
			}
		} else if rows, err = q.ConsoleTranscript(ctx, dbq.ConsoleTranscriptParams{OrgID: p.Org, ConversationID: c.ID, MaxRows: MaxTranscript, MaxBytes: MaxTranscriptBytes}); err != nil {
			return err
		}
		out = &Transcript{Conversation: sum, AgentID: c.AgentID.String(), LastEventID: seq}
		out.Truncated = len(rows) > 0 && rows[0].Total > int64(len(rows))
		for _, r := range rows {
			m := Message{
				ID: r.ID.String(), ConversationID: c.ID, Role: r.Role, Content: r.Content, CreateTime: r.CreatedAt, Author: p.shownAuthor(r.Author),
				Model: deref(r.Model), Provider: deref(r.Provider), PromptTokens: r.PromptTokens,
				CompletionTokens: r.CompletionTokens, Incomplete: r.Incomplete,
			}
			if r.LatencyMs != nil {
				d := time.Duration(*r.LatencyMs) * time.Millisecond
				m.Latency = &d
			}
			m.Sources, m.ToolCalls = readJSON(ctx, r.ID, r.Sources, r.ToolCalls)
			out.Messages = append(out.Messages, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readJSON reads a message's sources and tool calls columns; a message
// stays readable without them.
func readJSON(ctx context.Context, id uuid.UUID, sources, calls []byte) ([]*parleyv1.Source, []*parleyv1.ToolCall) {
	srcs, err := jsonArray(sources, func() *parleyv1.Source { return &parleyv1.Source{} })
	if err != nil {
		slog.WarnContext(ctx, "unreadable message sources", "message", id, "err", err)
	}
	tcs, err := jsonArray(calls, func() *parleyv1.ToolCall { return &parleyv1.ToolCall{} })
	if err != nil {
		slog.WarnContext(ctx, "unreadable message tool calls", "message", id, "err", err)
	}
	return srcs, tcs
}

// jsonArray reads a JSON array of protobuf messages (as chat writes
// sources: protojson each).
func jsonArray[T proto.Message](raw []byte, newT func() T) ([]T, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	out := make([]T, 0, len(items))
	for i, it := range items {
		x := newT()
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(it, x); err != nil {
			return out, fmt.Errorf("item %d: %w", i, err)
		}
		out = append(out, x)
	}
	return out, nil
}
