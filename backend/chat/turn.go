package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/tool"
	"google.golang.org/protobuf/encoding/protojson"
)

const (
	// historyRows is how many past messages are read for the prompt.
	historyRows = 200
	// storeTimeout bounds writing an answer after the client is gone.
	storeTimeout = 10 * time.Second
)

// Service runs chat turns.
type Service struct {
	Store   *db.Store
	Catalog *llm.Catalog
	// Knowledge retrieves the agent's datastores' passages; nil: none.
	Knowledge *knowledge.Knowledge
	// Drain ends when the server shuts down: turns still running stop their
	// model call, send an error event and store what they generated.
	Drain context.Context
	Now   func() time.Time
}

// Emit receives a streaming turn's events in order. An error from it (the
// client is gone) stops the turn.
type Emit func(*parleyv1.ChatStreamResponse) error

// Run runs one turn for an admitted request. With emit nil it returns the
// whole reply. With emit, it sends token (and tool_call) events as they
// come, then a done event carrying what the reply carries, or an error event
// when the reply fails after text went out. It returns an error, and sends
// nothing, when the turn fails before any event: the transport then answers
// with an error status.
func (s *Service) Run(ctx context.Context, a *Admitted, req *parleyv1.ChatRequest, emit Emit) (*parleyv1.ChatResponse, error) {
	now := s.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	org := a.OrgID()
	modelName := a.Agent.Model
	if req.GetSelectedModel() != "" {
		modelName = req.GetSelectedModel()
	}
	route := s.Catalog.Resolve(modelName)
	channel := req.GetChannel()
	if channel == "" {
		channel = "api"
	}

	// 1. The conversation, its history and the user's message, stored
	// before the model is called.
	filter, err := knowledge.ParseIDs(req.GetFilters().GetDatasourceIds(), "filters.datasource_ids")
	if err != nil {
		return nil, err
	}
	var conv dbq.Conversation
	var history []dbq.ListMessagesRow
	var found []knowledge.Result
	var stores []dbq.Datastore
	err = s.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		contactID, err := upsertContact(ctx, q, org, req.GetContact())
		if err != nil {
			return err
		}
		if conv, err = s.conversation(ctx, q, a, req, channel, contactID); err != nil {
			return err
		}
		if history, err = q.ListMessages(ctx, dbq.ListMessagesParams{OrgID: org, ConversationID: conv.ID, MaxRows: historyRows}); err != nil {
			return err
		}
		if s.Knowledge != nil {
			// SECURITY: only this organization's datastores attached to this agent.
			if stores, err = s.Knowledge.AgentDatastores(ctx, q, org, a.Agent.ID); err != nil {
				return err
			}
			if len(stores) > 0 {
				if found, err = s.Knowledge.Search(ctx, q, org, stores, filter, req.GetQuery(), passagesPerTurn); err != nil {
					return err
				}
			}
		}
		atts, err := json.Marshal(attachmentsJSON(req.GetAttachments()))
		if err != nil {
			return err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		_, err = q.CreateMessage(ctx, dbq.CreateMessageParams{
			OrgID: org, ID: id, ConversationID: conv.ID, Role: "user", Content: req.GetQuery(),
			Channel: channel, Attachments: atts, Sources: []byte("[]"),
		})
		return err
	})
	if err != nil {
		return nil, err
	}

	// 2. The sources, then the model call.
	sources := make([]*parleyv1.Source, 0, len(found))
	seen := map[uuid.UUID]bool{}
	addSources := func(rs []knowledge.Result) error {
		for _, r := range rs {
			if seen[r.ChunkID] {
				continue
			}
			seen[r.ChunkID] = true
			src := sourceProto(r)
			sources = append(sources, src)
			if emit != nil {
				if err := emit(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Source{Source: src}}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := addSources(found); err != nil {
		return nil, err
	}
	search := &tool.Search{Store: s.Store, Knowledge: s.Knowledge, Org: org, Stores: stores, Filter: filter}
	var tools []llm.Tool
	if len(stores) > 0 && !route.NoTools && tool.Offered(a.Agent.Tools, tool.DatastoreQuery) {
		tools = []llm.Tool{search.Definition()}
	}
	llmReq := llm.Request{
		Knowledge: knowledge.Passages(found),
		Model:     route.Upstream, System: a.Agent.Instructions, Temperature: a.Agent.Temperature,
		Messages: append(promptHistory(history, route.HistoryBudget(a.Agent.Instructions, req.GetQuery())),
			llm.Message{Role: llm.RoleUser, Content: req.GetQuery(), ImageURLs: imageURLs(req.GetAttachments())}),
	}
	modelCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var draining atomic.Bool
	if s.Drain != nil {
		stop := context.AfterFunc(s.Drain, func() { draining.Store(true); cancel() })
		defer stop()
	}
	var answer strings.Builder
	var usage *llm.Usage
	sent := len(sources) > 0 && emit != nil
	var callErr error
	// The model may call datastore_query: each round runs the calls, gives
	// the model their results and calls it again; the last round offers no
	// tools, so a turn makes at most maxToolRounds+1 model calls. Tool calls
	// are reported as tool_call events; what they find joins the sources.
	for round := 0; ; round++ {
		llmReq.Tools = tools
		if round == maxToolRounds {
			llmReq.Tools = nil
		}
		var calls []llm.ToolCall
		var said strings.Builder
		// Text after a tool round continues the answer: a paragraph break
		// keeps it from running into what the model said before its calls.
		needBreak := answer.Len() > 0
		callErr = route.Model.Stream(modelCtx, llmReq, func(ev llm.Event) error {
			switch {
			case ev.Text != "":
				if needBreak && !unicode.IsSpace([]rune(ev.Text)[0]) && !unicode.IsSpace(lastRune(answer.String())) {
					ev.Text = "\n\n" + ev.Text
				}
				needBreak = false
				answer.WriteString(ev.Text)
				said.WriteString(ev.Text)
				if emit != nil {
					sent = true
					return emit(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Token{Token: ev.Text}})
				}
			case ev.ToolCall != nil:
				calls = append(calls, *ev.ToolCall)
				if emit != nil {
					sent = true
					return emit(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_ToolCall{ToolCall: &parleyv1.ToolCall{
						Id: ev.ToolCall.ID, Name: ev.ToolCall.Name, Arguments: ev.ToolCall.Arguments}}})
				}
			case ev.Usage != nil:
				if usage == nil {
					usage = &llm.Usage{}
				}
				usage.PromptTokens += ev.Usage.PromptTokens
				usage.CompletionTokens += ev.Usage.CompletionTokens
			}
			return nil
		})
		if callErr != nil || len(calls) == 0 || llmReq.Tools == nil {
			break
		}
		results := make([]llm.ToolResult, 0, len(calls))
		for _, c := range calls {
			res, more, err := search.Run(modelCtx, c, len(sources))
			if err == nil {
				err = addSources(more)
			}
			if err != nil {
				callErr = err
				break
			}
			results = append(results, res)
		}
		if callErr != nil {
			break
		}
		llmReq.Messages = append(llmReq.Messages,
			llm.Message{Role: llm.RoleAssistant, Content: said.String(), ToolCalls: calls},
			llm.Message{Role: llm.RoleTool, ToolResults: results})
	}
	latency := now().Sub(start)
	text := answer.String()
	clientGone := ctx.Err() != nil
	drained := draining.Load()
	if callErr != nil && text == "" && !sent && !clientGone && !drained {
		// Nothing went out: a plain error, and nothing but the question is stored.
		return nil, upstreamError(callErr)
	}

	// 3. The answer, whole or cut short, stored even if the client left.
	if usage == nil {
		usage = &llm.Usage{PromptTokens: int64(promptTokens(llmReq)), CompletionTokens: int64(llm.CountTokens(text))}
	}
	cost := route.Cost(*usage)
	incomplete := callErr != nil
	resp := &parleyv1.ChatResponse{
		Answer: text, ConversationId: conv.ID, VisitorId: req.GetVisitorId(), Sources: sources,
		Usage: &parleyv1.Usage{
			PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens,
			TotalTokens: usage.PromptTokens + usage.CompletionTokens, Cost: cost,
		},
		Metadata: &parleyv1.ChatMetadata{Model: modelName, LatencyMs: latency.Milliseconds(), Provider: route.Model.Provider()},
	}
	storeCtx, cancelStore := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancelStore()
	err = s.Store.Tenant(storeCtx, org, func(q *dbq.Queries) error {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		resp.MessageId = id.String()
		lat, pt, ct := int32(latency.Milliseconds()), int32(usage.PromptTokens), int32(usage.CompletionTokens)
		provider := route.Model.Provider()
		srcJSON, err := sourcesJSON(sources)
		if err != nil {
			return err
		}
		_, err = q.CreateMessage(storeCtx, dbq.CreateMessageParams{
			OrgID: org, ID: id, ConversationID: conv.ID, Role: "assistant", Content: text, Channel: channel,
			Attachments: []byte("[]"), Sources: srcJSON, Model: &modelName, Provider: &provider,
			LatencyMs: &lat, PromptTokens: &pt, CompletionTokens: &ct, Cost: &cost, Incomplete: incomplete,
		})
		if err != nil {
			return err
		}
		return q.TouchConversation(storeCtx, dbq.TouchConversationParams{OrgID: org, ID: conv.ID})
	})
	if err != nil {
		return nil, err
	}

	switch {
	case clientGone:
		return nil, ctx.Err()
	case callErr != nil && emit == nil:
		return nil, upstreamError(callErr)
	case callErr != nil:
		code, msg := "UPSTREAM_ERROR", "the model provider failed mid-answer; what was generated is stored as incomplete"
		if drained {
			code, msg = "SHUTTING_DOWN", "the server is shutting down; send the message again"
		} else {
			slog.WarnContext(ctx, "model failed mid-stream", "provider", route.Model.Provider(), "err", callErr)
		}
		_ = emit(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Error{Error: &parleyv1.ChatError{Code: code, Message: msg}}})
		return resp, nil
	case emit != nil:
		done := &parleyv1.ChatResponse{
			ConversationId: resp.GetConversationId(), MessageId: resp.GetMessageId(), VisitorId: resp.GetVisitorId(),
			Sources: resp.GetSources(), Usage: resp.GetUsage(), Metadata: resp.GetMetadata(),
		}
		if err := emit(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Done{Done: done}}); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// maxToolRounds is how many times one turn lets the model call tools; the
// call after the last round offers none, so the model must answer.
const maxToolRounds = 3

// passagesPerTurn is how many chunks a turn retrieves.
const passagesPerTurn = 5

func sourceProto(r knowledge.Result) *parleyv1.Source {
	excerpt := r.Text
	if len(excerpt) > 300 {
		excerpt = strings.ToValidUTF8(excerpt[:300], "") + "…"
	}
	title := r.Title
	if title == "" {
		title = r.DatasourceName
	}
	return &parleyv1.Source{
		Source: r.Source(), Score: r.Score, DatasourceName: r.DatasourceName, DatasourceId: r.DatasourceID.String(),
		Chunk: r.Text, Title: title, Url: r.URL, Excerpt: excerpt,
	}
}

// conversation returns the conversation to continue, or a new one. The
// client's id is kept when it is new, or when it names a conversation of the
// same agent and caller; an id that is someone else's is never joined: a new
// conversation with a server-made id starts instead.
func (s *Service) conversation(ctx context.Context, q *dbq.Queries, a *Admitted, req *parleyv1.ChatRequest, channel string, contactID *uuid.UUID) (dbq.Conversation, error) {
	org, id := a.OrgID(), req.GetConversationId()
	var visitor *string
	if v := req.GetVisitorId(); v != "" {
		visitor = &v
	}
	for attempt := 0; attempt < 2; attempt++ {
		c, err := q.GetConversation(ctx, dbq.GetConversationParams{OrgID: org, ID: id})
		switch {
		case err == nil && c.AgentID == a.Agent.ID && sameCaller(a, c, req.GetVisitorId()):
			return c, q.TouchConversation(ctx, dbq.TouchConversationParams{OrgID: org, ID: id, ContactID: contactID})
		case err == nil:
			// SECURITY: another agent's or visitor's conversation is never joined.
			nid, err := uuid.NewV7()
			if err != nil {
				return dbq.Conversation{}, err
			}
			id = nid.String()
		case !errors.Is(err, pgx.ErrNoRows):
			return dbq.Conversation{}, err
		}
		c, err = q.CreateConversation(ctx, dbq.CreateConversationParams{
			OrgID: org, ID: id, AgentID: a.Agent.ID, VisitorID: visitor, Channel: channel, ContactID: contactID,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			// Another request created this id first (and has committed: the
			// insert waited for it). Read it again: join it if it is ours,
			// else start under a new id.
			continue
		}
		return c, err
	}
	return dbq.Conversation{}, apperr.New(apperr.Conflict, "conversation %q is being created by another request; retry", id)
}

// sameCaller: a key of the organization may continue any conversation of its
// agent; a visitor only its own.
func sameCaller(a *Admitted, c dbq.Conversation, visitor string) bool {
	if a.Principal != nil {
		return true
	}
	return c.VisitorID != nil && *c.VisitorID == visitor
}

// promptHistory turns stored messages (newest first) into the prompt's
// history, oldest first, keeping the newest that fit in budget tokens.
func promptHistory(rows []dbq.ListMessagesRow, budget int) []llm.Message {
	var out []llm.Message
	used := 0
	for _, r := range rows {
		n := llm.CountTokens(r.Content)
		if used+n > budget {
			break
		}
		used += n
		role := llm.RoleUser
		if r.Role == "assistant" {
			role = llm.RoleAssistant
		}
		out = append(out, llm.Message{Role: role, Content: r.Content})
	}
	slices.Reverse(out)
	return out
}

func promptTokens(r llm.Request) int {
	n := llm.CountTokens(r.System)
	for _, m := range r.Messages {
		n += llm.CountTokens(m.Content)
		for _, t := range m.ToolResults {
			n += llm.CountTokens(t.Content)
		}
	}
	return n
}

// upstreamError is the client-facing error of a failed model call.
func upstreamError(err error) error {
	var pe *llm.ProviderError
	if errors.As(err, &pe) {
		if pe.Status == 429 || pe.Status == 0 || pe.Status == 503 {
			return &apperr.Error{Code: apperr.Unavailable, Message: fmt.Sprintf("the model provider %s is unavailable; try again", pe.Provider), RetryAfter: pe.RetryAfter}
		}
		return apperr.New(apperr.Upstream, "the model provider %s failed (status %d); try again", pe.Provider, pe.Status)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return apperr.New(apperr.Unavailable, "the model provider timed out; try again")
	}
	return err
}

type attachmentJSON struct {
	URL  string `json:"url"`
	Name string `json:"name,omitempty"`
	Type string `json:"type,omitempty"`
	Size int64  `json:"size,omitempty"`
}

func attachmentsJSON(atts []*parleyv1.Attachment) []attachmentJSON {
	out := make([]attachmentJSON, 0, len(atts))
	for _, a := range atts {
		out = append(out, attachmentJSON{URL: a.GetUrl(), Name: a.GetName(), Type: a.GetType(), Size: a.GetSize()})
	}
	return out
}

// imageURLs are the attachments a vision model can look at.
func imageURLs(atts []*parleyv1.Attachment) []string {
	var out []string
	for _, a := range atts {
		t := strings.ToLower(a.GetType())
		u := strings.ToLower(a.GetUrl())
		if strings.HasPrefix(t, "image/") || (t == "" && hasAnySuffix(u, ".png", ".jpg", ".jpeg", ".gif", ".webp")) {
			out = append(out, a.GetUrl())
		}
	}
	return out
}

func hasAnySuffix(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// upsertContact stores the request's contact (by email, else phone) and
// returns its id; nil when the request has none.
func upsertContact(ctx context.Context, q *dbq.Queries, org uuid.UUID, c *parleyv1.Contact) (*uuid.UUID, error) {
	if c == nil || (c.GetEmail() == "" && c.GetPhoneNumber() == "") {
		return nil, nil
	}
	custom := []byte("{}")
	if c.GetCustomFields() != nil {
		b, err := c.GetCustomFields().MarshalJSON()
		if err != nil {
			return nil, apperr.InvalidField("contact.custom_fields", "must be a JSON object")
		}
		custom = b
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	var phone *string
	if p := c.GetPhoneNumber(); p != "" {
		phone = &p
	}
	var got uuid.UUID
	if email := strings.ToLower(c.GetEmail()); email != "" {
		got, err = q.UpsertContactByEmail(ctx, dbq.UpsertContactByEmailParams{
			OrgID: org, ID: id, Email: &email, PhoneNumber: phone, FirstName: c.GetFirstName(),
			LastName: c.GetLastName(), CustomFields: custom,
		})
	} else {
		got, err = q.UpsertContactByPhone(ctx, dbq.UpsertContactByPhoneParams{
			OrgID: org, ID: id, PhoneNumber: phone, FirstName: c.GetFirstName(), LastName: c.GetLastName(), CustomFields: custom,
		})
	}
	if err != nil {
		return nil, err
	}
	return &got, nil
}

// sourcesJSON is the sources as a JSON array, as the message row keeps them.
func sourcesJSON(sources []*parleyv1.Source) ([]byte, error) {
	parts := make([]string, 0, len(sources))
	for _, s := range sources {
		b, err := protojson.Marshal(s)
		if err != nil {
			return nil, err
		}
		parts = append(parts, string(b))
	}
	return []byte("[" + strings.Join(parts, ",") + "]"), nil
}

// lastRune is the last character of s (utf8.RuneError for "").
func lastRune(s string) rune {
	r, _ := utf8.DecodeLastRuneInString(s)
	return r
}
