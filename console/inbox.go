package console

import (
	"net/http"
	"net/url"
	"time"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/conversation"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/handoff"
)

// Handoff in the console: the inbox of conversations people have (status
// human_requested), every agent's, refreshed every few seconds; and on a
// transcript, the reply box and the buttons that resolve a conversation,
// give it back to the agent or take it over. Replies are signed with the
// member's email.

// inboxPollSeconds is how often the inbox (and a transcript people have)
// asks for news.
const inboxPollSeconds = 3

// inboxView is what the inbox shows.
type inboxView struct {
	Page   *conversation.Page
	Agents map[string]string // id → name
	Cursor string
}

func (c *Console) inboxData(r *http.Request) (inboxView, error) {
	ctx := r.Context()
	d := inboxView{Cursor: r.URL.Query().Get("cursor"), Agents: map[string]string{}}
	var err error
	d.Page, err = c.conversations().ListForPrincipal(ctx, conversation.Filter{
		Status: handoff.HumanRequested, Cursor: d.Cursor, Limit: convPageSize,
	})
	if err != nil {
		return d, err
	}
	agents, err := c.Agents.ListAgents(ctx, &parleyv1.ListAgentsRequest{Limit: convAgentsShown})
	if err != nil {
		return d, err
	}
	for _, a := range agents.GetAgents() {
		d.Agents[a.GetId()] = a.GetName()
	}
	// An organization with more agents than one listing holds: the page's
	// others are read one by one (a row without its agent's name is one
	// nobody can place).
	for _, cv := range d.Page.Conversations {
		if id := cv.GetAgentId(); d.Agents[id] == "" {
			// Deleted since (its conversations with it): no name.
			if a, err := c.Agents.GetAgent(ctx, &parleyv1.GetAgentRequest{Id: id}); err == nil {
				d.Agents[id] = a.GetAgent().GetName()
			}
		}
	}
	return d, nil
}

func (c *Console) inbox(w http.ResponseWriter, r *http.Request) {
	d, err := c.inboxData(r)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, http.StatusOK, inboxPage(viewOf(r.Context()), d))
}

// inboxList is the inbox's table alone, for its polling.
func (c *Console) inboxList(w http.ResponseWriter, r *http.Request) {
	d, err := c.inboxData(r)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, http.StatusOK, inboxTable(d))
}

// convMessages is a transcript's messages alone, for its polling while
// people have the conversation.
func (c *Console) convMessages(w http.ResponseWriter, r *http.Request) {
	t, err := c.conversations().TranscriptForPrincipal(r.Context(), r.PathValue("id"))
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, http.StatusOK, convMessageList(t))
}

// convReply sends a person's reply, signed with the member's email.
func (c *Console) convReply(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	read, err := formCreated(r)
	var p *conversation.Party
	if err == nil {
		p, err = conversation.MemberParty(ctx, viewOf(ctx).Member.Email)
	}
	if err == nil {
		_, _, err = c.conversations().Reply(ctx, p, id, read, r.FormValue("text"), "dashboard")
	}
	switch {
	case apperr.CodeOf(err) == apperr.Invalid:
		c.flash(ctx, "Your reply was not sent: "+shown(err).Message)
	case err != nil:
		c.errorPage(w, r, err)
		return
	default:
		c.flash(ctx, "Reply sent. The agent stays silent in this conversation until it is resolved or handed back.")
	}
	http.Redirect(w, r, convPath(id), http.StatusSeeOther)
}

// convSetStatus resolves a conversation, gives it back to the agent, or
// takes it over.
func (c *Console) convSetStatus(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, status := r.PathValue("id"), r.FormValue("status")
	read, err := formCreated(r)
	var p *conversation.Party
	if err == nil {
		p, err = conversation.MemberParty(ctx, viewOf(ctx).Member.Email)
	}
	if err == nil {
		_, err = c.conversations().Update(ctx, p, id, conversation.Change{Status: &status, Reason: r.FormValue("reason"), Created: read})
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	msg := map[string]string{
		handoff.Resolved:       "Resolved. The agent answers if the visitor writes again.",
		handoff.Unresolved:     "Handed back: the agent answers again.",
		handoff.HumanRequested: "You have the conversation: the agent is silent until it is resolved or handed back.",
	}[status]
	c.flash(ctx, msg)
	http.Redirect(w, r, convPath(id), http.StatusSeeOther)
}

// convDelete deletes a conversation with its messages (admins).
func (c *Console) convDelete(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	read, err := formCreated(r)
	var p *conversation.Party
	if err == nil {
		p, err = conversation.MemberParty(ctx, viewOf(ctx).Member.Email)
	}
	if err == nil {
		// SECURITY: the member's organization's conversation only.
		err = c.conversations().Delete(ctx, p, r.PathValue("id"), read)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.flash(ctx, "The conversation was deleted, with its messages.")
	http.Redirect(w, r, "/console/conversations", http.StatusSeeOther)
}

// createdField is the field of a transcript's forms that carries the
// creation time of the conversation the member read: ids are the
// clients' own, and a conversation deleted meanwhile may have been started
// again under its id by another visitor, whom a reply typed for the first
// must not reach (conversation.Service refuses it, 409).
const createdField = "created"

// convCreated is a conversation's creation time as its forms carry it.
func convCreated(s *parleyv1.ConversationSummary) string {
	return s.GetCreateTime().AsTime().Format(time.RFC3339Nano)
}

// formCreated is the creation time a transcript's form carries; zero when
// it carries none (a form without it acts on the conversation of that id).
func formCreated(r *http.Request) (time.Time, error) {
	v := r.FormValue(createdField)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return t, apperr.InvalidField(createdField, "must be the conversation's creation time (RFC 3339)")
	}
	return t, nil
}

// statusSetBy says who last changed a conversation's status, and why.
func statusSetBy(s *parleyv1.ConversationSummary) string {
	if s.GetStatusChangedBy() == "" {
		return ""
	}
	by := s.GetStatusChangedBy()
	if by == handoff.ByAgent {
		by = "the agent"
	}
	out := "by " + by
	if s.GetStatusReason() != "" {
		out += ": " + s.GetStatusReason()
	}
	return out
}

func isHandedOff(s *parleyv1.ConversationSummary) bool { return handoff.Silenced(s.GetStatus()) }

// inboxListURL is the inbox table's address, for its polling.
func inboxListURL(cursor string) string {
	if cursor == "" {
		return "/console/inbox/list"
	}
	return "/console/inbox/list?cursor=" + url.QueryEscape(cursor)
}

// convPath is a conversation's page, and the root of its actions. (An id
// of dots alone would be a path segment that browsers resolve away, %2E
// escapes included: chat's schema refuses such ids.)
func convPath(id string) string { return "/console/conversations/" + url.PathEscape(id) }
