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
	"github.com/parleyhq/parley/backend/contact"
	"github.com/parleyhq/parley/backend/conversation/view"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/handoff"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/metrics"
	"github.com/parleyhq/parley/backend/netguard"
	"github.com/parleyhq/parley/backend/telemetry"
	"github.com/parleyhq/parley/backend/tool"
	"github.com/parleyhq/parley/backend/webhook"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
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
	// Tools are what the deployment gives the agents' tools (search
	// backend, outbound HTTP); nil: datastore_query alone, over Store and
	// Knowledge.
	Tools *tool.Deps
	// Fetch reads attachments, documents and images (NewAttachmentFetcher);
	// nil: they are refused.
	Fetch *netguard.Client
	// Drain ends when the server shuts down: turns still running stop their
	// model call, send an error event and store what they generated.
	Drain context.Context
	// Hooks emits the webhook events of turns (conversation.created,
	// message.created) with the rows that cause them; nil: none.
	Hooks *webhook.Emitter
	// TurnTimeout bounds a turn, counted from its arrival (its wait in the
	// Queue included): the model calls
	// (every try the provider's retry policy makes) and the tool rounds
	// must be over by then, or the turn fails with apperr.Timeout and keeps
	// what was generated as incomplete. 0: no bound.
	TurnTimeout time.Duration
	// Queue bounds the turns running at once and those waiting to, and
	// what one organization holds of them (TurnQueue.ShareByOrg); nil: no
	// bound.
	Queue *TurnQueue
	Now   func() time.Time
}

// Emit receives a streaming turn's events in order. An error from it (the
// client is gone) stops the turn.
type Emit func(*parleyv1.ChatStreamResponse) error

// Run runs one turn for an admitted request. With emit nil it returns the
// whole reply. With emit, it sends source, token and tool_call events as
// they come, then a done event carrying what the reply carries, or an error
// event when the reply fails after text went out. It returns an error, and
// sends nothing, when the turn fails before any event: the transport then
// answers with an error status.
//
// A turn first takes a slot in the Queue (it waits for one at most
// TurnTimeout, and is refused with 503 OVERLOADED when too many wait or its
// organization holds its share of the queue), then
// reads as its phases: admit (what the admitted request runs with),
// load (the conversation, its history, the knowledge, the question stored),
// build the prompt, the model and tool rounds, persist the answer, finish
// (the done or error event).
func (s *Service) Run(ctx context.Context, a *Admitted, req *parleyv1.ChatRequest, emit Emit) (*parleyv1.ChatResponse, error) {
	arrived := time.Now()
	release, err := s.Queue.acquire(ctx, s.Drain, s.TurnTimeout, a.OrgID())
	if err != nil {
		return nil, err
	}
	defer release()
	t, err := s.admitTurn(a, req, emit, arrived)
	if err != nil {
		return nil, err
	}
	var images *heldBytes
	if t.documents, t.images, images, err = s.readAttachments(ctx, req.GetAttachments(), t); err != nil {
		return nil, err
	}
	defer images.release()
	releaseLoad, err := s.Queue.acquireLoad(ctx)
	if err != nil {
		return nil, err
	}
	err = s.load(ctx, t)
	releaseLoad()
	if err != nil {
		return nil, err
	}
	if handoff.Silenced(t.conv.Status) {
		resp, err := s.answerForPeople(ctx, t)
		return resp, t.endStream(ctx, err)
	}
	kit, prompt := s.buildPrompt(t)
	g := s.rounds(ctx, t, kit, prompt)
	if g.err != nil && g.text == "" && len(t.calls) == 0 && ctx.Err() == nil {
		// The model gave nothing: nothing but the question is stored, and
		// no turn is counted. A provider that refused the call bills
		// nothing; one that ended it without an answer (its filter, its
		// bound spent on a thinking model's thoughts) reported what it
		// billed, which is charged (unanswered). Nothing went out: a
		// plain error; sources went out (a stream): an error event ends
		// the stream.
		s.unanswered(ctx, t, g.usage)
		if g.drained {
			return nil, t.endStream(ctx, errShuttingDown)
		}
		return nil, t.endStream(ctx, t.modelError(ctx, g.err))
	}
	resp, err := s.persist(ctx, t, g)
	if err != nil {
		return nil, t.endStream(ctx, err)
	}
	return t.finish(ctx, resp, g)
}

// endStream ends a stream that failed after its first event (the answer
// could not be stored, say) with an error event, so that the client reads
// an end rather than a stream cut short; err is returned as it is, for the
// transport to log. Nothing is sent when no stream started or nobody is
// listening.
func (t *turn) endStream(ctx context.Context, err error) error {
	if err == nil || t.emit == nil || !t.sent || ctx.Err() != nil {
		return err
	}
	if apperr.CodeOf(err) == apperr.Internal {
		slog.ErrorContext(ctx, "turn failed after its first event", "err", err)
	}
	pub := apperr.Public(err)
	_ = t.emit(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Error{Error: &parleyv1.ChatError{
		Code: apperr.Lookup(pub.Code).SpecCode, Message: pub.Message,
	}}})
	return err
}

// turn is one turn's state, phase after phase.
type turn struct {
	a    *Admitted
	req  *parleyv1.ChatRequest
	emit Emit

	// Admit.
	now   func() time.Time
	start time.Time
	// deadline is when the model and tool work must be over (zero: never),
	// on the wall clock whatever now says.
	deadline  time.Time
	org       uuid.UUID
	modelName string
	route     llm.Route
	channel   string
	filter    []uuid.UUID
	// documents are the document attachments' text.
	documents documents
	// images are the image attachments, fetched.
	images []llm.Image

	// Load.
	conv    dbq.Conversation
	history []dbq.ListMessagesRow
	found   []knowledge.Result
	stores  []dbq.Datastore

	// The reply so far: its sources (each once), and whether any event went
	// out.
	sources []*parleyv1.Source
	// cited numbers the sources by tool.SourceKey, from 1.
	cited map[string]int
	sent  bool
	// calls are the tool calls reported so far, stored with the answer.
	calls []*parleyv1.ToolCall
	// promptTokens estimates the prompt as sent (Route.WindowTokens), tool
	// rounds included: what it leaves of the window bounds the next reply.
	promptTokens int
	// gotText: the model produced text (its time to first token is counted).
	gotText bool
	// cut: the provider stopped the last model call's reply short of its
	// end (its bound, its filters: llm.Event.Cut); the answer is stored
	// as incomplete.
	cut bool
}

// left is what remains of the turn's time (at least a millisecond), 0
// when it has no deadline.
func (t *turn) left() time.Duration {
	if t.deadline.IsZero() {
		return 0
	}
	return max(time.Until(t.deadline), time.Millisecond)
}

// admitTurn settles what an admitted request runs with: the model route,
// the channel, the datasource filter.
func (s *Service) admitTurn(a *Admitted, req *parleyv1.ChatRequest, emit Emit, arrived time.Time) (*turn, error) {
	t := &turn{a: a, req: req, emit: emit, now: s.Now, org: a.OrgID(), modelName: a.Agent.Model, cited: map[string]int{}}
	if t.now == nil {
		t.now = time.Now
	}
	t.start = t.now()
	if s.TurnTimeout > 0 {
		// From the turn's arrival, its wait for a slot included: a JSON
		// turn sends nothing before its answer, and the whole request must
		// end before a proxy's idle timeout (DefaultTurnTimeout). Counted
		// from the slot, a turn that waited could last twice as long.
		t.deadline = arrived.Add(s.TurnTimeout)
	}
	if m := req.GetSelectedModel(); m != "" && m != a.Agent.Model {
		// SECURITY: a keyless visitor of a public agent runs on the
		// owner's bill, within limits that count requests, not cost: the
		// owner's model answers them, not the dearest one they could name
		// (15 to 20 times the cheapest), nor a provider the owner did not
		// choose for their data. A key (the organization's own backend)
		// or a member (the playground) may choose.
		if a.Principal == nil {
			return nil, &apperr.Error{Code: apperr.Forbidden, Field: "selected_model",
				Message: "choosing the model (selectedModel) needs an API key; without one the agent's own model answers"}
		}
		t.modelName = m
	}
	t.route = s.Catalog.Resolve(t.modelName)
	t.channel = req.GetChannel()
	if t.channel == "" {
		t.channel = "api"
	}
	var err error
	t.filter, err = knowledge.ParseIDs(req.GetFilters().GetDatasourceIds(), "filters.datasource_ids")
	return t, err
}

// load reads the conversation (or starts it), its history, the agent's
// datastores and the passages they hold for the question, and stores the
// question, all before the model is called; then the passages go out as
// source events.
//
// A turn of an organization known to have no webhook endpoint, carrying no
// contact, takes one round trip and one durable commit here (loadOneTrip);
// the others, and a turn whose conversation id turns out to be someone
// else's, take loadTx's transaction.
func (s *Service) load(ctx context.Context, t *turn) error {
	atts, err := json.Marshal(attachmentsJSON(t.req.GetAttachments()))
	if err != nil {
		return err
	}
	question, err := uuid.NewV7()
	if err != nil {
		return err
	}
	var stores []dbq.Datastore
	done := false
	// (A caller with neither key nor visitor id, which Admit never lets
	// through, could not join even the conversation the batch creates:
	// loadTx would start a second one. It takes loadTx at once.)
	anyone := t.a.Principal != nil || t.req.GetVisitorId() != ""
	// A turn with a datasource filter takes loadTx too: the filter is
	// checked there before anything is stored.
	if s.Hooks.Silent(t.org) && t.req.GetContact() == nil && anyone && len(t.filter) == 0 {
		if done, stores, err = s.loadOneTrip(ctx, t, question, atts); err != nil {
			return err
		}
	}
	if !done {
		if stores, err = s.loadTx(ctx, t, question, atts); err != nil {
			return err
		}
	}
	// The passages are searched after the question's commit: it is stored
	// even if the search fails, as it is when the model fails, and no row
	// stays locked while the question is embedded.
	if t.retrieves(stores) {
		if err := s.retrieve(ctx, t, stores); err != nil {
			return err
		}
	}
	// A text its datasource holds twice (a footer on every page) is one
	// passage: the reply's sources hold it once (cite), and the prompt must
	// number the passages as they do (given it twice, a model citing the
	// passage after it named the source after that one).
	found := t.found[:0]
	srcs := make([]*parleyv1.Source, 0, len(t.found))
	seen := map[string]bool{}
	for _, r := range t.found {
		src := tool.KnowledgeSource(r)
		if key := tool.SourceKey(src); !seen[key] {
			seen[key] = true
			found = append(found, r)
			srcs = append(srcs, src)
		}
	}
	t.found = found
	return t.cite(srcs)
}

// loadOneTrip is load's common path, in one batch: BEGIN, the scope, the
// conversation's insert under the client's id (nothing when it exists), its
// row, its history, the agent's datastores, the question's insert when the
// turn may join that conversation (CreateQuestion decides, in SQL, as
// conversation does in Go) and COMMIT, durable. done is false when the
// question was not stored (the id is another agent's or caller's): nothing
// was, and loadTx starts a conversation under a new id. No webhook event
// is written: the caller checked that the organization has no endpoint.
// The passages are searched after the commit (load).
func (s *Service) loadOneTrip(ctx context.Context, t *turn, question uuid.UUID, atts []byte) (done bool, stores []dbq.Datastore, _ error) {
	org, req := t.org, t.req
	visitor := visitorID(req)
	var o opening
	first := func(q *dbq.Queries) error {
		done = false // first runs twice: recorded, then read
		if err := s.open(ctx, q, t, &o); err != nil {
			return err
		}
		_, err := q.CreateQuestion(ctx, dbq.CreateQuestionParams{
			OrgID: org, ID: question, ConversationID: req.GetConversationId(), AgentID: t.a.Agent.ID,
			AnyCaller: t.a.Principal != nil, VisitorID: visitor,
			Content: req.GetQuery(), Channel: t.channel, Attachments: atts,
		})
		done = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	}
	if err := s.Store.TenantBatch(ctx, org, first); err != nil || !done {
		return false, nil, err
	}
	if o.existsErr != nil || o.conv.AgentID != t.a.Agent.ID || !sameCaller(t.a, o.conv, req.GetVisitorId()) {
		// Each statement reads in its own snapshot: the id was deleted
		// and made again by this caller between the reads and the
		// question's insert. What was read is not the conversation the
		// question joined: read that one, without history.
		o.history = nil
		err := s.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
			var err error
			o.conv, err = q.GetConversation(ctx, dbq.GetConversationParams{OrgID: org, ID: req.GetConversationId()})
			return err
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil, apperr.New(apperr.Aborted, "conversation %q was deleted while this turn stored its message; retry", req.GetConversationId())
		}
		if err != nil {
			return false, nil, err
		}
	}
	// The question joined the conversation read: its history is the turn's.
	t.conv, t.history = o.conv, o.history
	return true, o.stores, nil
}

// loadTx is load in a transaction of several round trips: its first
// statements go with BEGIN (Store.TenantTxWith), as loadOneTrip's: the
// conversation's insert under the client's id (nothing when it exists), its
// row, its history and the agent's datastores (returned: load searches
// them after the commit). Then the contact is merged, the conversation
// joined or a new one started (conversation), the question stored, and the
// webhook events of a new conversation and of the question enqueued with
// them.
func (s *Service) loadTx(ctx context.Context, t *turn, question uuid.UUID, atts []byte) ([]dbq.Datastore, error) {
	org, req := t.org, t.req
	var o opening
	first := func(q *dbq.Queries) error { return s.open(ctx, q, t, &o) }
	err := s.Store.TenantTxWith(ctx, org, first, func(tx pgx.Tx, q *dbq.Queries) error {
		t.conv, t.history = o.conv, o.history
		created, existsErr := o.created, o.existsErr
		// SECURITY: only datasources of this agent's datastores; before
		// anything is stored (the transaction's first statements wrote
		// nothing the check's error keeps).
		if err := knowledge.CheckFilter(ctx, q, org, storeIDs(o.stores), t.filter, "filters.datasource_ids", "this agent's datastores"); err != nil {
			return err
		}
		contactID, err := s.mergeContact(ctx, tx, org, req.GetContact(), t.a.Principal == nil)
		if err != nil {
			return err
		}
		if created {
			if contactID != nil {
				if err := q.TouchConversation(ctx, dbq.TouchConversationParams{OrgID: org, ID: t.conv.ID, ContactID: contactID}); err != nil {
					return err
				}
				t.conv.ContactID = contactID
			}
		} else {
			joined := t.conv.ID
			if t.conv, created, err = s.conversation(ctx, q, t.a, req, t.channel, contactID, t.conv, existsErr); err != nil {
				return err
			}
			if t.conv.ID != joined || created {
				// Another agent's or caller's conversation: a new one
				// starts, with no history.
				t.history = nil
			}
		}
		if created {
			err := s.Hooks.Emit(ctx, tx, org, webhook.ConversationCreated, func() (proto.Message, error) {
				return view.OrgSummary(ctx, q, org, t.conv.ID)
			})
			if err != nil {
				return err
			}
		}
		row, err := q.CreateMessage(ctx, dbq.CreateMessageParams{
			OrgID: org, ID: question, ConversationID: t.conv.ID, Role: "user", Content: req.GetQuery(),
			Channel: t.channel, Attachments: atts, Sources: []byte("[]"),
		})
		if err != nil {
			return err
		}
		return s.emitMessage(ctx, tx, org, view.Message{
			ID: row.ID.String(), ConversationID: t.conv.ID, Role: "user", Content: req.GetQuery(), CreateTime: row.CreatedAt,
		})
	})
	return o.stores, err
}

// opening is what a turn's first statements read (open).
type opening struct {
	// created: the conversation was inserted under the client's id.
	created bool
	// conv is the conversation under the client's id; existsErr is
	// pgx.ErrNoRows when there is none (an insert that lost a race to a
	// transaction that rolled back).
	conv      dbq.Conversation
	existsErr error
	// history is conv's, newest first; stores are the agent's datastores.
	history []dbq.ListMessagesRow
	stores  []dbq.Datastore
}

// open sends a turn's first statements, into o: the conversation's insert
// under the client's id (nothing when it exists), its row, its history and
// the agent's datastores. It runs as Store.TenantTxWith's first does:
// recorded, then replayed.
func (s *Service) open(ctx context.Context, q *dbq.Queries, t *turn, o *opening) error {
	org, id := t.org, t.req.GetConversationId()
	c, err := q.CreateConversation(ctx, dbq.CreateConversationParams{
		OrgID: org, ID: id, AgentID: t.a.Agent.ID, VisitorID: visitorID(t.req), Channel: t.channel,
	})
	o.created = err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return s.conversationError(err, t.a)
	}
	if o.conv, o.existsErr = q.GetConversation(ctx, dbq.GetConversationParams{OrgID: org, ID: id}); o.existsErr != nil && !errors.Is(o.existsErr, pgx.ErrNoRows) {
		return o.existsErr
	}
	if o.created {
		o.conv = c
	}
	// SECURITY: read for the client's id, kept only if the turn joins that
	// conversation; never sent anywhere otherwise.
	if o.history, err = q.ListMessages(ctx, dbq.ListMessagesParams{OrgID: org, ConversationID: id, MaxRows: historyRows}); err != nil {
		return err
	}
	if s.Knowledge != nil {
		// SECURITY: only this organization's datastores attached to this agent.
		o.stores, err = s.Knowledge.AgentDatastores(ctx, q, org, t.a.Agent.ID)
	}
	return err
}

// retrieves reports whether the turn searches knowledge: the agent has
// datastores and the conversation is not in people's hands.
func (t *turn) retrieves(stores []dbq.Datastore) bool {
	return len(stores) > 0 && !handoff.Silenced(t.conv.Status)
}

// retrieve finds the passages the agent's datastores (stores) hold for the
// question: it embeds the question first, holding no connection (a remote
// embedder takes a network round trip), then searches in a transaction of
// its own. A datastore deleted since stores were read finds nothing.
func (s *Service) retrieve(ctx context.Context, t *turn, stores []dbq.Datastore) error {
	t.stores = stores
	query, err := s.Knowledge.EmbedQuery(ctx, stores, t.req.GetQuery())
	if err != nil {
		return err
	}
	return s.Store.Tenant(ctx, t.org, func(q *dbq.Queries) error {
		t.found, err = s.Knowledge.Search(ctx, q, t.org, stores, t.filter, query, passagesPerTurn)
		return err
	})
}

// storeIDs are the datastores' ids.
func storeIDs(stores []dbq.Datastore) []uuid.UUID {
	ids := make([]uuid.UUID, len(stores))
	for i, d := range stores {
		ids[i] = d.ID
	}
	return ids
}

// cite adds sources to the reply, each once, and sends them as events; a
// tool numbered them so (tool.Call.Number), by their keys as it made them.
func (t *turn) cite(srcs []*parleyv1.Source) error {
	for _, src := range srcs {
		key := tool.SourceKey(src)
		storableSource(src)
		if _, ok := t.cited[key]; ok {
			continue
		}
		t.sources = append(t.sources, src)
		t.cited[key] = len(t.sources)
		if err := t.send(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Source{Source: src}}); err != nil {
			return err
		}
	}
	return nil
}

// send emits an event of a streaming turn; a JSON turn sends nothing.
func (t *turn) send(ev *parleyv1.ChatStreamResponse) error {
	if t.emit == nil {
		return nil
	}
	t.sent = true
	return t.emit(ev)
}

// buildPrompt is the model's request: the agent's instructions, the
// passages found, the history that fits, the question; and the kit of tools
// the agent offers (none on routes whose model cannot call tools).
func (s *Service) buildPrompt(t *turn) (*tool.Kit, llm.Request) {
	deps := s.Tools
	if deps == nil {
		deps = &tool.Deps{Store: s.Store, Knowledge: s.Knowledge}
	}
	kit := &tool.Kit{}
	if !t.route.NoTools {
		kit = tool.NewKit(deps, &tool.Turn{
			Profile: tool.Profile{Tools: t.a.Agent.Tools, Settings: tool.ParseSettings(t.a.Agent.ToolSettings), HasDatastores: len(t.stores) > 0},
			Org:     t.org, Agent: t.a.Agent.ID, ConversationID: t.conv.ID, ConversationCreatedAt: t.conv.CreatedAt, HandoffMessage: t.a.Agent.HandoffMessage, Stores: t.stores, Filter: t.filter,
		})
	}
	system := t.a.Agent.Instructions
	if !kit.Empty() {
		system += "\n\n" + tool.SystemNote
	}
	if len(t.documents) > 0 {
		system += "\n\n" + attachmentNote
	}
	req := llm.Request{
		Knowledge: knowledge.Passages(t.found),
		Model:     t.route.Upstream, System: system, Temperature: t.a.Agent.Temperature, ModelTemperature: t.route.FixedTemperature,
		Messages: []llm.Message{{Role: llm.RoleUser, Content: t.req.GetQuery(), Images: t.images}},
	}
	if !kit.Empty() {
		// Offered on the first call (rounds sets them for each call): the
		// definitions are prompt too.
		req.Tools = kit.Definitions()
	}
	if len(t.documents) > 0 {
		// The documents take at most what the rest of the prompt leaves
		// of the window with room for the answer, as the history does
		// after them.
		req.Messages[0].Content += t.documents.text(t.route.HistoryBudget(t.route.WindowTokens(0, req)))
	}
	// The history fits in what the rest of the prompt, passages and tool
	// definitions included, leaves of the window with room for the answer.
	base := t.route.WindowTokens(0, req)
	history, used := promptHistory(t.history, t.route.HistoryBudget(base))
	req.Messages = append(history, req.Messages...)
	t.promptTokens = base + used
	// MaxOutputTokens, unless the prompt without its history already
	// leaves less of a small window (many or long passages, a long
	// question or document): then what it leaves, as after a tool round.
	req.MaxTokens = t.route.AnswerRoom(t.promptTokens)
	return kit, req
}

// generation is what the model and tool rounds gave.
type generation struct {
	text  string
	usage *llm.Usage
	// err: the model call (or a tool) failed; text may hold what came first.
	err error
	// drained: the server's shutdown cut the turn.
	drained bool
	// handedOver: a tool of this turn handed the conversation to people
	// (request_human); its answer is stored though people now have it.
	handedOver bool
	// timedOut: the turn's deadline cut it; err is then apperr.Timeout.
	timedOut bool
	// prompt is the last request, for counting its tokens when the provider
	// reports no usage.
	prompt llm.Request
}

// rounds calls the model; while it calls tools, runs them, gives it their
// results and calls it again. After maxToolRounds rounds the model is
// offered no tools, so a turn makes at most maxToolRounds+1 model calls.
// Each call is reported as a tool_call event once it has run; what a citing
// tool found joins the sources.
func (s *Service) rounds(ctx context.Context, t *turn, kit *tool.Kit, prompt llm.Request) generation {
	modelCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !t.deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		modelCtx, cancelDeadline = context.WithDeadlineCause(modelCtx, t.deadline, errTurnDeadline)
		defer cancelDeadline()
	}
	var draining atomic.Bool
	if s.Drain != nil {
		stop := context.AfterFunc(s.Drain, func() { draining.Store(true); cancel() })
		defer stop()
	}
	var g generation
	var answer strings.Builder
	// full: a round's results filled what the window leaves; the model is
	// offered no more tools, and answers.
	full := false
	for round := 0; ; round++ {
		prompt.Tools = nil
		if round < maxToolRounds && !kit.Empty() && !full {
			prompt.Tools = kit.Definitions()
		}
		said, calls, err := t.callModel(modelCtx, prompt, &answer, &g.usage)
		if err != nil {
			g.err = err
			break
		}
		if len(calls) == 0 {
			break
		}
		if prompt.Tools == nil {
			// Calls the model made when offered none are reported, not run.
			g.err = t.refuseCalls(calls)
			break
		}
		// People may have taken the conversation over while the model
		// answered: its calls do not run for them (a contact recorded, a
		// request sent, after a person's reply) nor is the model asked
		// again, its tokens streamed to the visitor over the person's.
		// The answer so far is not stored (CreateAnswer): the visitor
		// hears the handoff message.
		if s.takenOver(modelCtx, t) {
			break
		}
		// The round's results get what the window leaves after its calls.
		call := llm.Message{Role: llm.RoleAssistant, Content: said, ToolCalls: calls}
		room := resultRoom{left: t.route.ResultRoom(t.promptTokens + t.route.WindowTokens(t.promptTokens, llm.Request{Messages: []llm.Message{call}}))}
		results, end, err := t.runCalls(modelCtx, kit, calls, &room)
		if err != nil {
			g.err = err
			break
		}
		full = room.full()
		// The calls ran: a cut that stopped the reply at them (its bound
		// reached in their arguments) did not cut the answer.
		t.cut = false
		step := []llm.Message{call, {Role: llm.RoleTool, ToolResults: results}}
		prompt.Messages = append(prompt.Messages, step...)
		// The round's calls and results grow the prompt: the next reply
		// gets what the window still leaves (a small window's server
		// refuses a request asking past it).
		t.promptTokens += t.route.WindowTokens(t.promptTokens, llm.Request{Messages: step})
		prompt.MaxTokens = t.route.AnswerRoom(t.promptTokens)
		if end != nil {
			g.handedOver = true
			if end.Reply != "" {
				// The tool speaks in the model's stead ("A person will
				// answer here shortly."), as the answer's last paragraph.
				g.err = t.say(end.Reply, &answer)
			}
			break
		}
	}
	g.text, g.drained, g.prompt = answer.String(), draining.Load(), prompt
	if g.err != nil && !g.drained && ctx.Err() == nil && errors.Is(context.Cause(modelCtx), errTurnDeadline) {
		// The provider (or a tool) saw only its context end: say why.
		g.timedOut = true
		g.err = apperr.New(apperr.Timeout, "the model gave no complete answer within %s; try again", s.TurnTimeout)
	}
	return g
}

// takenOver reports whether people have the turn's conversation now
// (status human_requested), or a person replied in it since the turn read
// it: read between the rounds of a turn, which
// began while the model had it. A turn that hands the conversation over
// itself ends its rounds there. The conversation gone, or made again
// under its id, is persist's to tell; so is a read that fails (the turn
// goes on, as before the check: CreateAnswer still keeps its answer out).
func (s *Service) takenOver(ctx context.Context, t *turn) bool {
	var over bool
	// SECURITY: the turn's organization and conversation.
	err := s.Store.Tenant(ctx, t.org, func(q *dbq.Queries) error {
		c, err := q.ConversationTakenOver(ctx, dbq.ConversationTakenOverParams{OrgID: t.org, ID: t.conv.ID, SeenEventSeq: t.conv.EventSeq})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		// A person who replied and then resolved the conversation (or
		// gave it back) took it over too: the calls the model made
		// without reading the reply do not run (request_human would hand
		// a resolved conversation back to people), and CreateAnswer keeps
		// the answer out.
		over = err == nil && c.CreatedAt.Equal(t.conv.CreatedAt) && (handoff.Silenced(c.Status) || c.Replied)
		return err
	})
	if err != nil && ctx.Err() == nil {
		slog.WarnContext(ctx, "could not read whether people took the conversation over", "err", err)
	}
	return over
}

// errShuttingDown ends a turn the server's shutdown cut.
var errShuttingDown = &apperr.Error{Code: apperr.ShuttingDown, Message: "the server is shutting down; send the message again"}

// errTurnDeadline is the cause of a turn's model context ending at its
// deadline (Service.TurnTimeout).
var errTurnDeadline = errors.New("the turn's deadline passed")

// callModel makes one model call: its text joins the answer (and goes out
// as token events), its usage adds up, its tool calls are returned with
// what it said before them.
func (t *turn) callModel(ctx context.Context, prompt llm.Request, answer *strings.Builder, usage **llm.Usage) (string, []llm.ToolCall, error) {
	var calls []llm.ToolCall
	var said strings.Builder
	// Text after a tool round continues the answer: a paragraph break keeps
	// it from running into what the model said before its calls.
	needBreak := answer.Len() > 0
	ctx, span := telemetry.StartModelCall(ctx, t.route.Model.Provider(), t.route.Upstream, prompt.Temperature)
	callUsage := llm.Usage{PromptTokens: -1}
	// A reply cut short before tool calls is followed by another: only
	// the last call's cut is the answer's.
	t.cut = false
	err := t.route.Model.Stream(ctx, prompt, func(ev llm.Event) error {
		switch {
		case ev.Cut != "":
			t.cut = true
		case ev.Text != "":
			if !t.gotText {
				t.gotText = true
				metrics.FirstToken(t.route.Model.Provider(), t.route.Upstream, t.now().Sub(t.start))
			}
			if needBreak && !unicode.IsSpace([]rune(ev.Text)[0]) && !unicode.IsSpace(lastRune(answer.String())) {
				ev.Text = "\n\n" + ev.Text
			}
			needBreak = false
			answer.WriteString(ev.Text)
			said.WriteString(ev.Text)
			return t.send(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Token{Token: ev.Text}})
		case ev.ToolCall != nil:
			calls = append(calls, *ev.ToolCall)
		case ev.Usage != nil:
			if *usage == nil {
				*usage = &llm.Usage{}
			}
			// A server's wrong count (a negative one) is no credit to
			// the organization: counted as none.
			in, out := max(ev.Usage.PromptTokens, 0), max(ev.Usage.CompletionTokens, 0)
			(*usage).PromptTokens += in
			(*usage).CompletionTokens += out
			callUsage.PromptTokens = max(callUsage.PromptTokens, 0) + in
			callUsage.CompletionTokens += out
		}
		return nil
	})
	if callUsage.PromptTokens < 0 && (said.Len() > 0 || len(calls) > 0) {
		// The call gave text or tool calls but no usage (cut mid-answer,
		// the client gone, a server that reports none): counted as
		// persist counts a turn without usage, its prompt and what it
		// said, its calls included. Left out, a call after a tool round
		// that did report cost nothing, and with a server that reports
		// none a tool round's call cost nothing.
		if *usage == nil {
			*usage = &llm.Usage{}
		}
		(*usage).PromptTokens += int64(llm.PromptTokens(prompt))
		(*usage).CompletionTokens += int64(llm.CountTokens(said.String()))
		for _, c := range calls {
			(*usage).CompletionTokens += int64(llm.CountTokens(c.Name) + llm.CountTokens(c.Arguments))
		}
	}
	telemetry.EndModelCall(span, callUsage.PromptTokens, callUsage.CompletionTokens, err)
	if err != nil {
		t.countProviderError(ctx, err)
	}
	return said.String(), calls, err
}

// countProviderError counts a failed model call by its kind; a call the
// client or the shutdown cancelled, or that stopped because the client went
// away, is not the provider's failure. Nor is one the client's own deadline
// ended (gRPC's grpc-timeout, Connect's Connect-Timeout-Ms): only the turn's
// deadline (errTurnDeadline) or the provider's own timeout counts as one.
func (t *turn) countProviderError(ctx context.Context, err error) {
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errTurnDeadline) {
		return
	}
	var pe *llm.ProviderError
	timedOut := errors.Is(err, context.DeadlineExceeded)
	switch {
	case errors.Is(err, llm.ErrNoAnswer) && errors.As(err, &pe):
		metrics.ProviderError(pe.Provider, "no_answer")
	case errors.As(err, &pe):
		metrics.ProviderError(pe.Provider, metrics.ProviderErrorKind(pe.Status, timedOut))
	case timedOut:
		metrics.ProviderError(t.route.Model.Provider(), "timeout")
	}
}

// runCalls runs one round's calls through the kit, in order, reporting
// each; end is the first that ends the model's turn, nil when none does.
// Every call of the reply is handed to the kit (a lead captured beside a
// handoff is one request), which refuses those past its bounds with an
// error result (tool.Kit.Run). The results the model reads take at most
// room tokens together (fitResult), which they take from it.
func (t *turn) runCalls(ctx context.Context, kit *tool.Kit, calls []llm.ToolCall, room *resultRoom) (results []llm.ToolResult, end *tool.Ran, err error) {
	kit.Round()
	for _, c := range calls {
		call := tool.Call{ID: c.ID, Name: c.Name, Arguments: c.Arguments, Cited: len(t.sources), Numbers: t.cited}
		// A name the kit does not offer is the model's own text, which a
		// visitor can steer: the span names no such tool.
		name := c.Name
		if !kit.Offers(name) {
			name = "unknown"
		}
		callCtx, span := telemetry.StartToolCall(ctx, name, c.ID)
		ran, err := kit.Run(callCtx, call)
		telemetry.EndToolCall(span, ran.IsError, err)
		if err != nil {
			return nil, nil, err
		}
		if err := t.cite(ran.Sources); err != nil {
			return nil, nil, err
		}
		if err := t.reportCall(c, ran.IsError, ran.Summary); err != nil {
			return nil, nil, err
		}
		results = append(results, fitResult(ran, room))
		if ran.Traits.EndsTurn && !ran.IsError && end == nil {
			end = &ran
		}
	}
	return results, end, nil
}

// cutNote ends a tool result cut to what the model's context window leaves.
const cutNote = "\n… (cut here: the rest does not fit in what the context window leaves)"

// resultRoom is what a round's results may still take of the window.
type resultRoom struct {
	// left is in tokens, as charged.
	left int
	// byBytes are the results charged their bytes, not yet counted (a
	// token is at least a byte: what fits in bytes needs no count).
	byBytes []string
}

// settle charges the results charged their bytes their tokens: what the
// bytes overcharged is left again.
func (r *resultRoom) settle() {
	for _, c := range r.byBytes {
		r.left += len(c) - llm.CountTokens(c)
	}
	r.byBytes = nil
}

// full reports whether the results left no room, counted in tokens.
func (r *resultRoom) full() bool {
	if r.left == 0 {
		r.settle()
	}
	return r.left == 0
}

// fitResult is a call's result as the model reads it, in at most room's
// tokens, which it takes from room: whole when it fits, else cut with
// cutNote inside its delimiters, room then 0. A round's results were sent
// whole: a round of endpoints' answers (16 KiB each, up to some 8,000 tokens)
// passed the window, the provider refused the prompt, and the turn failed
// after its tools had run. A result charged its bytes is counted before a
// later one is cut: charged bytes alone (some 4 a token), a round's later
// results were cut, and no more tools offered, in a room that held them
// all.
func fitResult(ran tool.Ran, room *resultRoom) llm.ToolResult {
	res := ran.ForModel
	if len(res.Content) > room.left {
		room.settle()
	}
	if n := len(res.Content); n <= room.left {
		room.left -= n
		room.byBytes = append(room.byBytes, res.Content)
		return res
	}
	n := llm.CountTokens(res.Content)
	if n <= room.left {
		room.left -= n
		return res
	}
	content := ran.Content
	cut := 0
	if keep := room.left - llm.CountTokens(tool.Untrusted(res.Name, cutNote, res.IsError)); keep > 0 {
		cut = len(content) * keep / n
	}
	for {
		for cut > 0 && !utf8.RuneStart(content[cut]) {
			cut--
		}
		res.Content = tool.Untrusted(res.Name, content[:cut]+cutNote, res.IsError)
		// Counted as the model reads it: Untrusted defuses each
		// "<tool_output" in the text, a token or more the raw text's count
		// left out (a result dense with them passed its room by a third).
		if cut == 0 || llm.CountTokens(res.Content) <= room.left {
			break
		}
		cut = cut * 9 / 10
	}
	room.left, room.byBytes = 0, nil
	return res
}

// say adds text of Parley's own to the answer, as a paragraph of its own,
// and sends it as a token event.
func (t *turn) say(text string, answer *strings.Builder) error {
	if answer.Len() > 0 && !unicode.IsSpace(lastRune(answer.String())) {
		text = "\n\n" + text
	}
	answer.WriteString(text)
	return t.send(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Token{Token: text}})
}

// refuseCalls reports calls made past the last tool round (or to a model
// offered no tools): they are not run.
func (t *turn) refuseCalls(calls []llm.ToolCall) error {
	for _, c := range calls {
		if err := t.reportCall(c, true, "not run: no tools are offered at this point of the turn"); err != nil {
			return err
		}
	}
	return nil
}

// reportCall sends a call's tool_call event.
func (t *turn) reportCall(c llm.ToolCall, failed bool, summary string) error {
	status := "ok"
	if failed {
		status = "error"
	}
	call := &parleyv1.ToolCall{Id: storable(c.ID), Name: storable(c.Name), Arguments: storable(c.Arguments), Status: status, Result: storable(summary)}
	t.calls = append(t.calls, call)
	return t.send(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_ToolCall{ToolCall: call}})
}

// storable is s as Postgres stores text: without NUL, and with bytes that
// are not UTF-8 replaced. What reaches a stored answer from outside Parley
// (the model's text and tool calls, a search backend's results) may hold
// either: refused by Postgres, it failed the turn with a 500 and lost the
// answer, after the tools' effects had committed.
func storable(s string) string {
	if contact.Storable(s) {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
}

// storableSource makes a source's text storable.
func storableSource(src *parleyv1.Source) {
	for _, f := range []*string{&src.Source, &src.DatasourceName, &src.Chunk, &src.Title, &src.Url, &src.Excerpt, &src.DatasourceId, &src.Heading} {
		*f = storable(*f)
	}
}

// persist stores the answer, whole or cut short, even if the client left,
// with its usage, cost, model, provider and latency, and returns the reply.
func (s *Service) persist(ctx context.Context, t *turn, g generation) (*parleyv1.ChatResponse, error) {
	latency := t.now().Sub(t.start)
	g.text = storable(g.text)
	usage := g.usage
	if usage == nil {
		usage = &llm.Usage{PromptTokens: int64(llm.PromptTokens(g.prompt)), CompletionTokens: int64(llm.CountTokens(g.text))}
	}
	cost := t.route.Cost(*usage)
	provider := t.route.Model.Provider()
	// Labelled by the upstream model: the name a request gives is the
	// client's, an unbounded set; the catalog's upstreams are not.
	metrics.Turn(provider, t.route.Upstream, latency)
	metrics.Usage(provider, t.route.Upstream, t.a.PlanName(), usage.PromptTokens, usage.CompletionTokens, cost)
	resp := &parleyv1.ChatResponse{
		Answer: g.text, ConversationId: t.conv.ID, VisitorId: t.req.GetVisitorId(), Sources: t.sources,
		ToolCalls: t.calls,
		Usage: &parleyv1.Usage{
			PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens,
			TotalTokens: usage.PromptTokens + usage.CompletionTokens, Cost: cost, ToolCalls: int32(len(t.calls)),
		},
		Metadata: &parleyv1.ChatMetadata{Model: t.modelName, LatencyMs: latency.Milliseconds(), Provider: provider},
	}
	storeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	resp.MessageId = id.String()
	lat, pt, ct := int32(latency.Milliseconds()), int32(usage.PromptTokens), int32(usage.CompletionTokens)
	srcJSON, err := protoJSONArray(t.sources)
	if err != nil {
		return nil, err
	}
	callsJSON, err := protoJSONArray(t.calls)
	if err != nil {
		return nil, err
	}
	// An answer cut short: the model failed, or its provider stopped it
	// before its end (t.cut).
	incomplete := g.err != nil || t.cut
	var row dbq.CreateAnswerRow
	insert := func(q *dbq.Queries) error {
		var err error
		row, err = q.CreateAnswer(storeCtx, dbq.CreateAnswerParams{
			OrgID: t.org, ID: id, ConversationID: t.conv.ID, ConversationCreatedAt: t.conv.CreatedAt, Content: g.text, Channel: t.channel,
			Sources: srcJSON, Model: &t.modelName, Provider: &provider,
			LatencyMs: &lat, PromptTokens: &pt, CompletionTokens: &ct, Cost: &cost, Incomplete: incomplete,
			ToolCalls: callsJSON, HandedOver: g.handedOver,
			// The conversation's events as the turn read them, before its
			// question: a person's reply after them overtook the answer.
			SeenEventSeq: t.conv.EventSeq,
		})
		return err
	}
	// The question is durable already: the answer's commit does not wait
	// for the disk (Store.TenantAsync says what that risks). An
	// organization known to have no webhook endpoint gets no
	// message.created to write: the insert goes with BEGIN and COMMIT in
	// one round trip. Otherwise the event is written after the insert, in
	// its transaction: two round trips.
	store := func() error {
		if s.Hooks.Silent(t.org) {
			return s.Store.TenantAsyncBatch(storeCtx, t.org, insert)
		}
		return s.Store.TenantAsyncTxWith(storeCtx, t.org, insert, func(tx pgx.Tx, _ *dbq.Queries) error {
			return s.emitMessage(storeCtx, tx, t.org, view.Message{
				ID: row.ID.String(), ConversationID: t.conv.ID, Role: "assistant", Content: g.text, CreateTime: row.CreatedAt,
				Sources: t.sources, ToolCalls: t.calls, Model: t.modelName, Incomplete: incomplete,
			})
		})
	}
	// A lost connection is tried again within storeTimeout: the answer was
	// generated (and paid for), and a client told to try again would ask
	// the model again. The answer's id is fixed, so a try whose commit
	// landed before its connection was lost leaves the next one its own
	// row: stored.
	err = db.Retry(storeCtx, store)
	if db.Duplicate(err, "messages_pkey") {
		err = nil
	}
	tookOver := errors.Is(err, pgx.ErrNoRows)
	if tookOver {
		// No row: people have the conversation, or a person replied in
		// it while the model answered, or it is no longer the one the
		// question went to (deleted, perhaps started again under its id
		// by someone else).
		var gone bool
		if gone, err = s.replaced(storeCtx, t); err != nil {
			return nil, err
		}
		if gone {
			tookOver, err = false, errConversationGone
		}
	}
	if tookOver || errors.Is(err, errConversationGone) || db.ForeignKeyViolation(err, "messages_org_id_conversation_id_fkey") {
		// The conversation was deleted while the model answered (the
		// client hears NotFound), or people took it over, or another turn
		// handed it to them (CreateAnswer: the answer would come after
		// the handoff and their replies): the answer is not stored,
		// but what it cost is counted, as a deleted conversation's answers
		// are.
		s.keepUsage(storeCtx, t, 1, *usage, cost)
	}
	if tookOver {
		// What the visitor hears now is the agent's handoff message, as
		// on every turn while people have the conversation; the answer's
		// usage stays on the reply (it was spent).
		resp.Answer, resp.MessageId, resp.Sources = handoff.Message(t.a.Agent.HandoffMessage), "", []*parleyv1.Source{}
		resp.Metadata.Handoff = true
		return resp, nil
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// keepUsage counts usage (what it cost: cost) that no stored answer
// carries, as turns turns of the agent (usage_deleted).
func (s *Service) keepUsage(ctx context.Context, t *turn, turns int64, usage llm.Usage, cost float64) {
	kept := s.Store.TenantAsync(ctx, t.org, func(q *dbq.Queries) error {
		return q.AddDeletedUsage(ctx, dbq.AddDeletedUsageParams{
			OrgID: t.org, AgentID: t.a.Agent.ID, Turns: turns, Tokens: usage.PromptTokens + usage.CompletionTokens,
			Cost: cost, ToolCalls: int64(len(t.calls)),
		})
	})
	if kept != nil {
		slog.WarnContext(ctx, "the usage of an answer not stored is not counted", "err", kept)
	}
}

// unanswered charges the usage a provider reported for model calls that
// gave no answer (nil: none reported, nothing billed). No turn is
// counted: nothing was answered.
func (s *Service) unanswered(ctx context.Context, t *turn, usage *llm.Usage) {
	if usage == nil {
		return
	}
	cost := t.route.Cost(*usage)
	metrics.Usage(t.route.Model.Provider(), t.route.Upstream, t.a.PlanName(), usage.PromptTokens, usage.CompletionTokens, cost)
	storeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	s.keepUsage(storeCtx, t, 0, *usage, cost)
}

// errConversationGone is a turn's answer refused because its conversation
// was deleted meanwhile, as db.Store words a deleted parent.
var errConversationGone = apperr.New(apperr.NotFound, "the conversation this request refers to no longer exists (deleted meanwhile)")

// replaced reports whether the turn's conversation is gone: deleted, or
// deleted and started again under its id (another conversation, perhaps
// another visitor's, which none of the turn's messages may join).
func (s *Service) replaced(ctx context.Context, t *turn) (bool, error) {
	var c dbq.Conversation
	err := s.Store.Tenant(ctx, t.org, func(q *dbq.Queries) (err error) {
		c, err = q.GetConversation(ctx, dbq.GetConversationParams{OrgID: t.org, ID: t.conv.ID})
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return !c.CreatedAt.Equal(t.conv.CreatedAt), nil
}

// emitMessage emits message.created for a message stored in tx, its data
// the message as GET /api/v2/conversations/{id} shows it.
func (s *Service) emitMessage(ctx context.Context, tx pgx.Tx, org uuid.UUID, m view.Message) error {
	return s.Hooks.Emit(ctx, tx, org, webhook.MessageCreated, func() (proto.Message, error) { return m.Proto(), nil })
}

// finish ends the turn as its transport needs: the reply, or the error of
// a JSON turn; the done event, or an error event when the model failed
// after the stream began.
func (t *turn) finish(ctx context.Context, resp *parleyv1.ChatResponse, g generation) (*parleyv1.ChatResponse, error) {
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case g.err != nil && t.emit == nil && g.drained:
		// A JSON turn still running when the drain began (near the end of
		// the shutdown grace): what was generated is stored as incomplete,
		// the client is told to send the message again.
		return nil, errShuttingDown
	case g.err != nil && t.emit == nil:
		return nil, t.modelError(ctx, g.err)
	case g.err != nil:
		// The error event, then the error itself: Connect and gRPC end the
		// stream with its code in the trailers (a stream ending OK reads as
		// a complete answer to a client that checks the status), and the
		// REST paths log it and end with [DONE], as after endStream.
		err := apperr.New(apperr.Upstream, "the model provider failed mid-answer; what was generated is stored as incomplete")
		switch {
		case g.drained:
			err = errShuttingDown
		case g.timedOut:
			err = &apperr.Error{Code: apperr.Timeout, Message: g.err.Error() + "; what was generated is stored as incomplete"}
		default:
			slog.WarnContext(ctx, "model failed mid-stream", "provider", t.route.Model.Provider(), "err", g.err)
		}
		pub := apperr.Public(err)
		_ = t.emit(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Error{Error: &parleyv1.ChatError{
			Code: apperr.Lookup(pub.Code).SpecCode, Message: pub.Message,
		}}})
		return nil, err
	case t.emit != nil:
		done := &parleyv1.ChatResponse{
			ConversationId: resp.GetConversationId(), MessageId: resp.GetMessageId(), VisitorId: resp.GetVisitorId(),
			Sources: resp.GetSources(), Usage: resp.GetUsage(), Metadata: resp.GetMetadata(), ToolCalls: resp.GetToolCalls(),
		}
		if err := t.emit(&parleyv1.ChatStreamResponse{Event: &parleyv1.ChatStreamResponse_Done{Done: done}}); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// maxToolRounds is how many times one turn lets the model call tools; the
// call after the last round offers none, so the model must answer.
const maxToolRounds = 5

// passagesPerTurn is how many chunks a turn retrieves.
const passagesPerTurn = 5

// conversation returns the conversation to continue, or a new one, given
// what reading the client's id found (c, err: pgx.ErrNoRows when nothing).
// The client's id is kept when it is new, or when it names a conversation
// of the same agent and caller; an id that is someone else's is never
// joined: a new conversation with a server-made id starts instead.
// created reports that the conversation is new.
func (s *Service) conversation(ctx context.Context, q *dbq.Queries, a *Admitted, req *parleyv1.ChatRequest, channel string, contactID *uuid.UUID, c dbq.Conversation, err error) (conv dbq.Conversation, created bool, _ error) {
	org, id := a.OrgID(), req.GetConversationId()
	visitor := visitorID(req)
	for attempt := 0; attempt < 2; attempt++ {
		if attempt > 0 {
			c, err = q.GetConversation(ctx, dbq.GetConversationParams{OrgID: org, ID: id})
		}
		switch {
		case err == nil && c.AgentID == a.Agent.ID && sameCaller(a, c, req.GetVisitorId()):
			if contactID == nil {
				// The question's insert touches the conversation.
				return c, false, nil
			}
			return c, false, q.TouchConversation(ctx, dbq.TouchConversationParams{OrgID: org, ID: id, ContactID: contactID})
		case err == nil:
			// SECURITY: another agent's or visitor's conversation is never joined.
			nid, err := uuid.NewV7()
			if err != nil {
				return dbq.Conversation{}, false, err
			}
			id = nid.String()
		case !errors.Is(err, pgx.ErrNoRows):
			return dbq.Conversation{}, false, err
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
		if err != nil {
			return dbq.Conversation{}, false, s.conversationError(err, a)
		}
		return c, true, nil
	}
	return dbq.Conversation{}, false, apperr.New(apperr.Aborted, "conversation %q is being created by another request; retry", id)
}

// conversationError is a conversation's failed insert as the client hears
// of it: the agent was deleted since it was admitted (another instance's
// cache may hold it for a few seconds) when its foreign key refuses it.
func (s *Service) conversationError(err error, a *Admitted) error {
	if db.ForeignKeyViolation(err) {
		return apperr.New(apperr.NotFound, "agent %q not found", a.Agent.ID.String())
	}
	return err
}

// visitorID is the request's visitor id, nil when it has none (a key's).
func visitorID(req *parleyv1.ChatRequest) *string {
	if v := req.GetVisitorId(); v != "" {
		return &v
	}
	return nil
}

// sameCaller: a key of the organization may continue any conversation of its
// agent; a visitor only its own. (CreateQuestion decides the same in SQL,
// for loadOneTrip: change both or neither.)
func sameCaller(a *Admitted, c dbq.Conversation, visitor string) bool {
	if a.Principal != nil {
		return true
	}
	return c.VisitorID != nil && *c.VisitorID == visitor
}

// promptHistory turns stored messages (newest first) into the prompt's
// history, oldest first, keeping the newest that fit in budget tokens. It
// may hold two messages of one role in a row, or begin with an answer (two
// turns of the conversation ran at once, a turn's model failed, people
// replied, the budget cut it): the Anthropic and Gemini adapters join them
// as their APIs need (llm's alternating, which says why turns are not
// serialized instead).
func promptHistory(rows []dbq.ListMessagesRow, budget int) (_ []llm.Message, used int) {
	var out []llm.Message
	for _, r := range rows {
		if strings.TrimSpace(r.Content) == "" {
			// An answer stored without text (the model finished with
			// none, or failed before its first token after sources went
			// out): Anthropic refuses a blank text block and Gemini an
			// empty part, which failed every later turn of the
			// conversation.
			continue
		}
		// The message's role and delimiters take room too.
		n := llm.CountTokens(r.Content) + llm.MessageTokens
		if used+n > budget {
			break
		}
		used += n
		role := llm.RoleUser
		if r.Role == "assistant" || r.Role == "human" {
			// A person's reply speaks for the organization, as answers do.
			role = llm.RoleAssistant
		}
		out = append(out, llm.Message{Role: role, Content: r.Content})
	}
	slices.Reverse(out)
	return out, used
}

// modelError is a failed model call as the client is told it
// (upstreamError), logged with its cause, which the client's message
// leaves out: a provider refusing the connection or the key is the
// operator's to see.
func (t *turn) modelError(ctx context.Context, err error) error {
	slog.WarnContext(ctx, "model call failed", "provider", t.route.Model.Provider(), "model", t.route.Upstream, "err", err)
	return upstreamError(err)
}

// upstreamError is the client-facing error of a failed model call.
func upstreamError(err error) error {
	var pe *llm.ProviderError
	if errors.As(err, &pe) {
		if errors.Is(pe, llm.ErrNoAnswer) {
			// A content filter, a refusal, the reply bound spent on
			// thoughts: asking the same again ends the same way.
			return apperr.New(apperr.Upstream, "%s, from the model provider %s", pe.Err, pe.Provider)
		}
		if llm.IsProviderTimeout(pe) {
			// A per-phase deadline of the provider's call (llm.Timeouts).
			return apperr.New(apperr.Unavailable, "the model provider %s timed out; try again", pe.Provider)
		}
		// 529: Anthropic's "overloaded".
		if pe.Status == 429 || pe.Status == 0 || pe.Status == 503 || pe.Status == 529 {
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

func hasAnySuffix(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// mergeContact records the request's contact in the organization's
// contacts and returns its id; nil when the request names nobody. A new
// contact is a lead: lead.created, as when lead_capture records one. A
// public agent's visitor (unverified: no key) fills what a contact lacks
// and changes nothing it holds (contact.Fields); the organization's key
// updates it.
func (s *Service) mergeContact(ctx context.Context, tx pgx.Tx, org uuid.UUID, c *parleyv1.Contact, unverified bool) (*uuid.UUID, error) {
	f, ok, err := contact.FromRequest(c)
	if !ok || err != nil {
		return nil, err
	}
	f.Unverified = unverified
	id, created, err := contact.Merge(ctx, tx, org, f, nil)
	if err != nil {
		return nil, err
	}
	if created {
		if err := contact.EmitCreated(ctx, tx, s.Hooks, org, id); err != nil {
			return nil, err
		}
	}
	return &id, nil
}

// sourcesJSON is the sources as a JSON array, as the message row keeps them.
// protoJSONArray is a JSON array of protobuf messages, protojson each (as
// the conversation package reads sources and tool calls back).
func protoJSONArray[T proto.Message](items []T) ([]byte, error) {
	parts := make([]string, 0, len(items))
	for _, s := range items {
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
