package console

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/conversation"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// Conversations: per agent, newest first, filtered by status and visitor;
// and a conversation's transcript with the sources of its answers.

// convPageSize is how many conversations a page lists.
const convPageSize = conversation.MaxLimit

// convAgentsShown bounds the agents offered in the picker (the API's
// largest page); an agent beyond them can still be named in the URL.
const convAgentsShown = 100

// conversations reads as the member: its organization scopes every query.
func (c *Console) conversations() *conversation.Service {
	return &conversation.Service{Store: c.Store, Hooks: c.Hooks}
}

// convListView is what the conversations page shows.
type convListView struct {
	Agents    []*parleyv1.Agent
	AgentID   string
	Status    string
	VisitorID string
	Cursor    string
	Page      *conversation.Page
	Err       string
}

func (c *Console) convList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	agents, err := c.Agents.ListAgents(ctx, &parleyv1.ListAgentsRequest{Limit: convAgentsShown})
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	q := r.URL.Query()
	d := convListView{
		Agents: agents.GetAgents(), AgentID: q.Get("agent"), Status: q.Get("status"),
		VisitorID: q.Get("visitorId"), Cursor: q.Get("cursor"),
	}
	if d.AgentID == "" && len(d.Agents) > 0 {
		d.AgentID = d.Agents[0].GetId()
	}
	status := http.StatusOK
	if d.AgentID != "" {
		d.Page, err = c.conversations().ListForPrincipal(ctx, conversation.Filter{
			AgentID: d.AgentID, Status: d.Status, VisitorID: d.VisitorID, Cursor: d.Cursor, Limit: convPageSize,
		})
		if err != nil {
			// SECURITY: an unknown or another organization's agent is an
			// error page and lists nothing; bad filters show beside them.
			if apperr.CodeOf(err) != apperr.Invalid {
				c.errorPage(w, r, err)
				return
			}
			status, d.Err = http.StatusBadRequest, shown(err).Message
		}
		d.Agents = c.convWithAgent(r, d.Agents, d.AgentID)
	}
	render(w, r, status, convListPage(viewOf(ctx), d))
}

// convWithAgent adds the chosen agent to the picker when it is not among
// the agents listed (an organization with more than convAgentsShown), so
// that the picker shows the agent whose conversations are listed.
func (c *Console) convWithAgent(r *http.Request, agents []*parleyv1.Agent, id string) []*parleyv1.Agent {
	for _, a := range agents {
		if a.GetId() == id {
			return agents
		}
	}
	req := &parleyv1.GetAgentRequest{Id: id}
	if c.validate(req) != nil {
		return agents
	}
	a, err := c.Agents.GetAgent(r.Context(), req)
	if err != nil {
		return agents
	}
	return append(agents, a.GetAgent())
}

// convURL is the listing's address with these parameters (empty ones left
// out).
func convURL(agent, status, visitor, cursor string) string {
	v := url.Values{}
	for k, x := range map[string]string{"agent": agent, "status": status, "visitorId": visitor, "cursor": cursor} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if len(v) == 0 {
		return "/console/conversations"
	}
	return "/console/conversations?" + v.Encode()
}

// transcriptURL is a conversation's page.
func transcriptURL(id, agent string) string {
	return convPath(id) + "?" + url.Values{"agent": {agent}}.Encode()
}

// convTranscriptView is what a transcript page shows.
type convTranscriptView struct {
	T         *conversation.Transcript
	AgentName string
}

func (c *Console) convShow(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t, err := c.conversations().TranscriptForPrincipal(ctx, r.PathValue("id"))
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	// An agent named in the address must be the conversation's.
	if a := r.URL.Query().Get("agent"); a != "" && a != t.AgentID {
		c.errorPage(w, r, apperr.New(apperr.NotFound, "conversation %q not found", r.PathValue("id")))
		return
	}
	d := convTranscriptView{T: t}
	if req := (&parleyv1.GetAgentRequest{Id: t.AgentID}); c.validate(req) == nil {
		if a, err := c.Agents.GetAgent(ctx, req); err == nil {
			d.AgentName = a.GetAgent().GetName()
		}
	}
	render(w, r, http.StatusOK, convTranscriptPage(viewOf(ctx), d))
}

func convStatusLabel(s string) string {
	if s == "human_requested" {
		return "human requested"
	}
	return s
}

// convLatency shows how long an answer took.
func convLatency(d *time.Duration) string {
	if d == nil {
		return ""
	}
	if *d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
}

func convTokens(n *int32) string {
	if n == nil {
		return "?"
	}
	return strconv.Itoa(int(*n))
}

// convSourceName names a source by its datasource, else its URL or file.
func convSourceName(s *parleyv1.Source) string {
	switch {
	case s.GetDatasourceName() != "":
		return s.GetDatasourceName()
	case s.GetTitle() != "":
		return s.GetTitle()
	}
	return s.GetSource()
}

func convTime(t time.Time) string { return when(&t) }

// convExcerpt is the start of a long message, for the listing.
func convExcerpt(s string) string {
	const max = 160
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	return string(r[:max]) + "…"
}
