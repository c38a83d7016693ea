package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/usage"
	"github.com/parleyhq/parley/backend/writeguard"
	"github.com/parleyhq/parley/compat/wire"
)

// The choices the agent forms offer: the values the API accepts (see
// proto/parley/v1/agent.proto). An agent's model is one of agentModels; a
// playground turn may override it with any model a chat request may name.
var (
	agentModels = []string{"gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet"}
	chatModels  = []string{"gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet", "gemini-1-5-pro"}
	agentTools  = []string{"datastore_query", "web_search", "lead_capture", "http_request", "request_human"}
)

// agentsPerPage is the list's page size, the API's largest.
const agentsPerPage = 100

// maxFormBytes bounds the agent and playground forms (instructions may be
// 20,000 characters, a question 32,000).
const maxFormBytes = 1 << 20

// agentForm is what the create and edit forms hold, as typed.
type agentForm struct {
	Name, Description, Instructions string
	Model, Temperature, Visibility  string
	// HandoffMessage is what visitors read while people have a
	// conversation; blank is the default.
	HandoffMessage string
	// AllowedOrigins are the web origins that may call a public agent from
	// a browser, separated by spaces, commas or lines.
	AllowedOrigins    string
	Tools, Datastores []string
}

// newAgentForm is the create form's starting values: the API's defaults.
func newAgentForm() agentForm {
	return agentForm{Model: "gpt-4o-mini", Temperature: "0.7", Visibility: "private"}
}

func formOf(a *parleyv1.Agent) agentForm {
	return agentForm{
		Name: a.GetName(), Description: a.GetDescription(), Instructions: a.GetInstructions(),
		Model: a.GetModel(), Temperature: temperature(a.GetTemperature()), Visibility: a.GetVisibility(),
		Tools: a.GetTools(), Datastores: a.GetDatastores(), HandoffMessage: a.GetHandoffMessage(),
		AllowedOrigins: strings.Join(a.GetAllowedOrigins(), " "),
	}
}

func temperature(t float64) string { return strconv.FormatFloat(t, 'f', -1, 64) }

// readForm parses an urlencoded or multipart (a script's FormData) body of
// at most maxFormBytes.
func readForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	var err error
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		err = r.ParseMultipartForm(maxFormBytes)
	} else {
		err = r.ParseForm()
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return apperr.New(apperr.TooLarge, "the form is larger than the %d bytes allowed", maxFormBytes)
	}
	if err != nil {
		return apperr.New(apperr.Invalid, "the form could not be read")
	}
	return nil
}

func readAgentForm(r *http.Request) agentForm {
	f := r.PostForm
	return agentForm{
		Name: strings.TrimSpace(f.Get("name")), Description: f.Get("description"), Instructions: f.Get("instructions"),
		Model: f.Get("model"), Temperature: strings.TrimSpace(f.Get("temperature")), Visibility: f.Get("visibility"),
		Tools: f["tools"], Datastores: f["datastores"], HandoffMessage: strings.TrimSpace(f.Get("handoffMessage")),
		AllowedOrigins: f.Get("allowedOrigins"),
	}
}

// parseTemperature reads the temperature field; blank is nil.
func parseTemperature(s string) (*float64, error) {
	if s == "" {
		return nil, nil
	}
	t, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(t) || math.IsInf(t, 0) {
		return nil, apperr.InvalidField("temperature", "temperature: must be a number from 0 to 1")
	}
	return &t, nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// createRequest is the form as CreateAgent takes it: blank model,
// temperature and visibility take the API's defaults.
func (f agentForm) createRequest() (*parleyv1.CreateAgentRequest, error) {
	t, err := parseTemperature(f.Temperature)
	if err != nil {
		return nil, err
	}
	return &parleyv1.CreateAgentRequest{
		Name: f.Name, Description: f.Description, Instructions: f.Instructions, Model: optional(f.Model),
		Temperature: t, Tools: f.Tools, Visibility: optional(f.Visibility), Datastores: f.Datastores,
		HandoffMessage: optional(f.HandoffMessage), AllowedOrigins: f.origins(),
	}, nil
}

// updatePaths are the fields the edit form sets: every one.
var updatePaths = []string{"name", "description", "instructions", "model", "temperature", "tools", "visibility", "datastores", "handoff_message", "allowed_origins"}

// updateRequest is the form as UpdateAgent takes it: every field is in the
// mask and must be given (a blank one is refused by validation; unticked
// tools and datastores clear them).
func (f agentForm) updateRequest(id string) (*parleyv1.UpdateAgentRequest, error) {
	if f.Temperature == "" {
		return nil, apperr.InvalidField("temperature", "temperature: must be a number from 0 to 1")
	}
	t, err := parseTemperature(f.Temperature)
	if err != nil {
		return nil, err
	}
	return &parleyv1.UpdateAgentRequest{
		Id: id, UpdateMask: &fieldmaskpb.FieldMask{Paths: updatePaths},
		Name: &f.Name, Description: &f.Description, Instructions: &f.Instructions, Model: &f.Model,
		Temperature: t, Tools: nonNil(f.Tools), Visibility: &f.Visibility, Datastores: nonNil(f.Datastores),
		HandoffMessage: &f.HandoffMessage, AllowedOrigins: f.origins(),
	}, nil
}

// origins splits the allowed origins field into its origins.
func (f agentForm) origins() []string { return splitOrigins(f.AllowedOrigins) }

// splitOrigins splits an allowed origins field (of an agent or a form) into
// its origins, separated by spaces, commas or lines.
func splitOrigins(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// formError is the message a refused form shows, with its status; ok is
// false for errors that are the server's (shown as an error page).
func formError(err error) (status int, msg string, ok bool) {
	pub := shown(err)
	if pub.Code == apperr.Internal {
		return 0, "", false
	}
	return apperr.Lookup(pub.Code).HTTPStatus, pub.Message, true
}

// agentsList is what the agents page shows.
type agentsList struct {
	Agents      []*parleyv1.Agent
	Usage       *usage.Report
	Total       int64
	Page, Pages int32
	// The create form (admins): the organization's datastores to attach,
	// the values typed and what was wrong with them.
	Datastores []*parleyv1.Datastore
	Form       agentForm
	FormErr    string
}

func (c *Console) agents(w http.ResponseWriter, r *http.Request) {
	c.agentsWith(w, r, http.StatusOK, newAgentForm(), "")
}

func (c *Console) agentsWith(w http.ResponseWriter, r *http.Request, status int, form agentForm, formErr string) {
	ctx := r.Context()
	v := viewOf(ctx)
	page := int32(1)
	if raw := r.URL.Query().Get("page"); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 32)
		if err != nil || n < 1 {
			c.errorPage(w, r, apperr.InvalidField("page", "page: must be a positive number"))
			return
		}
		page = int32(n)
	}
	req := &parleyv1.ListAgentsRequest{Page: page, Limit: agentsPerPage}
	err := c.validate(req)
	var list *parleyv1.ListAgentsResponse
	if err == nil {
		list, err = c.Agents.ListAgents(ctx, req)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	// Stats per agent come from the usage report (one query for the page),
	// not from each agent's detail (one transaction per agent).
	rep, err := usage.Of(ctx, c.Store, v.Member.OrgID, time.Now())
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	data := agentsList{
		Agents: list.GetAgents(), Usage: rep, Total: list.GetTotal(), Page: page,
		Pages: int32(max(1, (list.GetTotal()+agentsPerPage-1)/agentsPerPage)), Form: form, FormErr: formErr,
	}
	if v.Member.Can("admin") {
		if data.Datastores, err = c.datastores(ctx); err != nil {
			c.errorPage(w, r, err)
			return
		}
	}
	render(w, r, status, agentsPage(v, data))
}

// datastores are all the organization's datastores, page after page: the
// agent form offers each.
func (c *Console) datastores(ctx context.Context) ([]*parleyv1.Datastore, error) {
	var all []*parleyv1.Datastore
	req := &parleyv1.ListDatastoresRequest{}
	for {
		ds, err := c.Datastores.ListDatastores(ctx, req)
		if err != nil {
			return nil, err
		}
		all = append(all, ds.GetDatastores()...)
		if ds.GetNextCursor() == "" {
			return all, nil
		}
		req.Cursor = ds.GetNextCursor()
	}
}

func (c *Console) createAgent(w http.ResponseWriter, r *http.Request) {
	if err := readForm(w, r); err != nil {
		c.errorPage(w, r, err)
		return
	}
	form := readAgentForm(r)
	req, err := form.createRequest()
	if err == nil {
		err = c.validate(req)
	}
	var resp *parleyv1.CreateAgentResponse
	if err == nil {
		resp, err = c.Agents.CreateAgent(r.Context(), req)
	}
	if err != nil {
		status, msg, ok := formError(err)
		if !ok {
			c.errorPage(w, r, err)
			return
		}
		c.agentsWith(w, r, status, form, msg)
		return
	}
	c.flash(r.Context(), "The agent was created.")
	http.Redirect(w, r, "/console/agents/"+resp.GetAgent().GetId(), http.StatusSeeOther)
}

// agentDetail is what an agent's page shows.
type agentDetail struct {
	Agent *parleyv1.Agent
	// The organization's datastores: names of the attached ones, choices of
	// the edit form.
	Datastores []*parleyv1.Datastore
	Form       agentForm
	FormErr    string
	// The playground: its conversation, and the last turn when it was
	// posted without script.
	ConversationID string
	Turn           *playgroundTurn
}

// playgroundTurn is a turn run without script, shown whole.
type playgroundTurn struct {
	Query, Model string
	Reply        *parleyv1.ChatResponse
	Err          string
}

func (c *Console) agent(w http.ResponseWriter, r *http.Request) {
	c.agentWith(w, r, http.StatusOK, nil, "", nil)
}

// agentWith renders the agent's page; form, when not nil, is the edit form
// as submitted.
func (c *Console) agentWith(w http.ResponseWriter, r *http.Request, status int, form *agentForm, formErr string, turn *playgroundTurn) {
	ctx := r.Context()
	req := &parleyv1.GetAgentRequest{Id: r.PathValue("id")}
	err := c.validate(req)
	var resp *parleyv1.GetAgentResponse
	if err == nil {
		resp, err = c.Agents.GetAgent(ctx, req)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	d := agentDetail{Agent: resp.GetAgent(), FormErr: formErr, Turn: turn, ConversationID: newConversationID()}
	if form != nil {
		d.Form = *form
	} else {
		d.Form = formOf(d.Agent)
	}
	if turn != nil && turn.Reply.GetConversationId() != "" {
		d.ConversationID = turn.Reply.GetConversationId()
	} else if id := r.PostForm.Get("conversationId"); turn != nil && id != "" {
		d.ConversationID = id
	}
	if d.Datastores, err = c.datastores(ctx); err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, status, agentPage(viewOf(ctx), d))
}

// newConversationID names a playground conversation (the page's script
// makes its own on each page load).
func newConversationID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "console-" + hex.EncodeToString(b)
}

func (c *Console) updateAgent(w http.ResponseWriter, r *http.Request) {
	if err := readForm(w, r); err != nil {
		c.errorPage(w, r, err)
		return
	}
	form := readAgentForm(r)
	req, err := form.updateRequest(r.PathValue("id"))
	if err == nil {
		err = c.validate(req)
	}
	if err == nil {
		_, err = c.Agents.UpdateAgent(r.Context(), req)
	}
	if err != nil {
		status, msg, ok := formError(err)
		if !ok {
			c.errorPage(w, r, err)
			return
		}
		// When the agent itself is missing or another organization's, the
		// page cannot be shown either: its error is the answer.
		c.agentWith(w, r, status, &form, msg, nil)
		return
	}
	c.flash(r.Context(), "The agent was saved.")
	http.Redirect(w, r, "/console/agents/"+r.PathValue("id"), http.StatusSeeOther)
}

func (c *Console) deleteAgent(w http.ResponseWriter, r *http.Request) {
	req := &parleyv1.DeleteAgentRequest{Id: r.PathValue("id")}
	err := c.validate(req)
	if err == nil {
		_, err = c.Agents.DeleteAgent(r.Context(), req)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.flash(r.Context(), "The agent was deleted, with its conversations.")
	http.Redirect(w, r, "/console/agents", http.StatusSeeOther)
}

// chatAgent runs one playground turn as the signed-in member. With Accept:
// text/event-stream it streams the turn as Server-Sent Events (the page's
// script); otherwise it shows the agent's page with the whole answer.
func (c *Console) chatAgent(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	streaming := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	sse := &sseWriter{w: w, guard: writeguard.New(w, 10*time.Second)}
	defer sse.guard.Stop()
	fail := func(err error, turn *playgroundTurn) {
		if streaming {
			sse.fail(ctx, err)
			return
		}
		status, msg, ok := formError(err)
		if !ok || turn == nil {
			c.errorPage(w, r, err)
			return
		}
		turn.Err = msg
		c.agentWith(w, r, status, nil, "", turn)
	}
	if err := readForm(w, r); err != nil {
		fail(err, nil)
		return
	}
	p, err := auth.FromContext(ctx)
	if err != nil {
		fail(err, nil)
		return
	}
	// The member's own organization's agent only (NotFound / Forbidden
	// otherwise, as for a key); no API key's limits are spent.
	adm, err := c.Admit.AdmitPrincipal(ctx, p, r.PathValue("id"))
	if err != nil {
		fail(err, nil)
		return
	}
	turn := &playgroundTurn{Query: r.PostForm.Get("query"), Model: r.PostForm.Get("model")}
	conv := r.PostForm.Get("conversationId")
	if conv == "" {
		conv = newConversationID()
	}
	// Playground turns are the dashboard channel: they are stored and
	// counted in the organization's usage like any turn, but no API key's
	// per-minute or per-day limit is spent on them (AdmitPrincipal counts
	// none): the console's session and the admin role let them in.
	req := &parleyv1.ChatRequest{
		AgentId: adm.Agent.ID.String(), Query: turn.Query, ConversationId: conv, Channel: "dashboard",
		SelectedModel: turn.Model,
	}
	if err := c.validate(req); err != nil {
		fail(err, turn)
		return
	}
	if !streaming {
		turn.Reply, err = c.Turns.Run(ctx, adm, req, nil)
		if err != nil {
			fail(err, turn)
			return
		}
		c.agentWith(w, r, http.StatusOK, nil, "", turn)
		return
	}
	_, err = c.Turns.Run(ctx, adm, req, sse.emit)
	if err != nil && ctx.Err() == nil {
		// Before any event: a plain error (with its status). After some: the
		// turn sent its own error event, unless what failed was storing the
		// answer, which this one reports.
		if !sse.started || !sse.ended {
			sse.fail(ctx, err)
		}
	}
}

// sseWriter writes the playground's events, flushing each one.
type sseWriter struct {
	w http.ResponseWriter
	// guard bounds each write at 10 s, and nothing between them.
	guard   *writeguard.Guard
	started bool
	// ended: a done or error event went out.
	ended bool
}

// send writes one event; the first one sends the headers with status.
func (s *sseWriter) send(status int, ev map[string]any) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(status)
	}
	if _, err := s.guard.Write(s.w, wire.Frame("", data)); err != nil {
		return err
	}
	return s.guard.Flush()
}

// fail reports err as an error event (with the error's status when it is
// the first thing sent).
func (s *sseWriter) fail(ctx context.Context, err error) {
	pub := shown(err)
	if pub.Code == apperr.Internal {
		slog.ErrorContext(ctx, "console playground", "err", err)
	}
	s.ended = true
	_ = s.send(apperr.Lookup(pub.Code).HTTPStatus, map[string]any{"type": "error", "code": string(pub.Code), "message": pub.Message})
}

// emit is the turn's chat.Emit: the REST API's event shapes (token, source,
// tool_call, done, error).
func (s *sseWriter) emit(ev *parleyv1.ChatStreamResponse) error {
	var out map[string]any
	switch e := ev.GetEvent().(type) {
	case *parleyv1.ChatStreamResponse_Token:
		out = map[string]any{"type": "token", "value": e.Token}
	case *parleyv1.ChatStreamResponse_Source:
		out = map[string]any{"type": "source", "source": wire.SourceJSON(e.Source)}
	case *parleyv1.ChatStreamResponse_ToolCall:
		out = map[string]any{"type": "tool_call", "name": e.ToolCall.GetName(), "arguments": e.ToolCall.GetArguments()}
	case *parleyv1.ChatStreamResponse_Done:
		d := e.Done
		sources := make([]map[string]any, 0, len(d.GetSources()))
		for _, src := range d.GetSources() {
			sources = append(sources, wire.SourceJSON(src))
		}
		s.ended = true
		out = map[string]any{
			"type": "done", "conversationId": d.GetConversationId(), "messageId": d.GetMessageId(), "sources": sources,
			"usage": map[string]any{
				"promptTokens": d.GetUsage().GetPromptTokens(), "completionTokens": d.GetUsage().GetCompletionTokens(),
				"totalTokens": d.GetUsage().GetTotalTokens(), "cost": d.GetUsage().GetCost(),
			},
			"metadata": map[string]any{
				"model": d.GetMetadata().GetModel(), "provider": d.GetMetadata().GetProvider(), "latency": d.GetMetadata().GetLatencyMs(),
			},
		}
	case *parleyv1.ChatStreamResponse_Error:
		s.ended = true
		out = map[string]any{"type": "error", "code": e.Error.GetCode(), "message": e.Error.GetMessage()}
	default:
		return nil
	}
	return s.send(http.StatusOK, out)
}

// datastoreName is the name of one of the organization's datastores.
func datastoreName(all []*parleyv1.Datastore, id string) string {
	for _, d := range all {
		if d.GetId() == id {
			return d.GetName()
		}
	}
	return id
}

func has(list []string, s string) bool { return slices.Contains(list, s) }

// pageURL is the agents list's page n.
func pageURL(n int32) string { return "/console/agents?page=" + strconv.Itoa(int(n)) }

// httpURL is u when it is a web address (a source's link), else "".
func httpURL(u string) string {
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		return u
	}
	return ""
}
