package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/member"
)

// The inbox lists the conversations people have; an admin replies (signed
// with their email, delivered to the visitor's reads), hands back,
// resolves and takes over; viewers read; other organizations see nothing.
func testInbox(t *testing.T, e *env) {
	org := e.Bootstrap("Helpdesk Co", "pro")
	admin := e.as(t, org.ID, member.Admin)
	viewer := e.as(t, org.ID, member.Viewer)
	agent := apiID(t, e, "/api/agents", org.Key, map[string]any{"name": "Desk", "instructions": "Help.", "visibility": "public"})
	chat(t, e, "", agent, "desk-1", "ada", "I need a person "+xssScript)
	chat(t, e, "", agent, "desk-2", "bob", "Just browsing")

	p := admin.get("/console/inbox")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, 1, p.Doc.Find("[data-testid=inbox-empty]").Length())
	require.Equal(t, "/console/inbox/list", p.Doc.Find("[data-testid=inbox]").AttrOr("hx-get", ""))
	require.Equal(t, "every 3s", p.Doc.Find("[data-testid=inbox]").AttrOr("hx-trigger", ""))

	// People take desk-1 over (the API, as the request_human tool would).
	r := e.api(t, "PUT", "/api/v2/conversations/desk-1", org.Key, map[string]any{"status": "human_requested", "reason": "asked for a person " + xssImg})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	for _, c := range []*client{admin, viewer} {
		p = c.get("/console/inbox/list")
		require.Equal(t, http.StatusOK, p.Status, p.Body)
		noMarkup(t, p)
		row := p.Doc.Find(`[data-testid=inbox-row][data-id="desk-1"]`)
		require.Equal(t, 1, row.Length(), p.Body)
		require.Contains(t, row.Find("[data-testid=handed-over]").Text(), "asked for a person")
		require.Contains(t, row.Text(), "Desk")
		require.Zero(t, p.Doc.Find(`[data-testid=inbox-row][data-id="desk-2"]`).Length())
	}

	// The transcript: admins get the reply box; it polls while people have
	// the conversation; viewers read only.
	p = admin.get("/console/conversations/desk-1")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, 1, p.Doc.Find("[data-testid=reply-form]").Length())
	require.Equal(t, 1, p.Doc.Find("[data-testid=hand-back]").Length())
	require.Equal(t, "/console/conversations/desk-1/messages", p.Doc.Find("[data-testid=messages]").AttrOr("hx-get", ""))
	p = viewer.get("/console/conversations/desk-1")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Zero(t, p.Doc.Find("[data-testid=reply-form]").Length())
	p = viewer.post("/console/conversations/desk-1/reply", url.Values{"text": {"hi"}})
	require.Equal(t, http.StatusForbidden, p.Status)
	p = viewer.post("/console/conversations/desk-1/status", url.Values{"status": {"resolved"}})
	require.Equal(t, http.StatusForbidden, p.Status)

	// An admin replies: the console signs it with the admin's email; the
	// visitor reads that a person wrote, not who (no staff email reaches
	// the public).
	p = admin.post("/console/conversations/desk-1/reply", url.Values{"text": {"Hello Ada, I'm here. " + xssScript}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/conversations/desk-1", p.Header.Get("Location"))
	p = admin.get("/console/conversations/desk-1/messages")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	noMarkup(t, p)
	human := p.Doc.Find(`[data-testid=message][data-role=human]`)
	require.Equal(t, 1, human.Length(), p.Body)
	require.Equal(t, admin.Member.Email, human.Find("[data-testid=author]").Text())
	r = e.api(t, "GET", "/api/v2/conversations/desk-1?agentId="+agent+"&visitorId=ada", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var d struct {
		Messages []struct{ Role, Text, Author string }
	}
	r.JSON(t, &d)
	last := d.Messages[len(d.Messages)-1]
	require.Equal(t, "human", last.Role)
	require.Empty(t, last.Author, "a visitor's read names no member")
	require.NotContains(t, string(r.Body), admin.Member.Email)
	// A blank reply is refused and said so.
	p = admin.post("/console/conversations/desk-1/reply", url.Values{"text": {"  "}})
	require.Equal(t, http.StatusSeeOther, p.Status)
	p = admin.get("/console/conversations/desk-1")
	require.Contains(t, p.Text("[data-testid=flash]"), "not sent")

	// Handing back gives it to the agent again; taking over and resolving.
	p = admin.post("/console/conversations/desk-1/status", url.Values{"status": {"unresolved"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	p = admin.get("/console/conversations/desk-1")
	require.Equal(t, "unresolved", p.Text("[data-testid=status]"))
	require.Equal(t, 1, p.Doc.Find("[data-testid=take-over]").Length())
	require.Equal(t, "false", p.Doc.Find("[data-testid=messages]").AttrOr("data-polling", ""))
	require.Equal(t, 1, admin.get("/console/inbox/list").Doc.Find("[data-testid=inbox-empty]").Length())
	p = admin.post("/console/conversations/desk-2/status", url.Values{"status": {"human_requested"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, 1, admin.get("/console/inbox/list").Doc.Find(`[data-testid=inbox-row][data-id="desk-2"]`).Length())
	p = admin.post("/console/conversations/desk-2/status", url.Values{"status": {"resolved"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	p = admin.get("/console/conversations/desk-2")
	require.Equal(t, "resolved", p.Text("[data-testid=status]"))
	require.Contains(t, p.Text("[data-testid=status-by]"), admin.Member.Email)
	p = admin.post("/console/conversations/desk-2/status", url.Values{"status": {"open"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	// A reason past the schema's 500 characters is refused here too (the
	// console's form does not pass through the schema), and nothing changes.
	p = admin.post("/console/conversations/desk-2/status", url.Values{"status": {"unresolved"}, "reason": {strings.Repeat("x", 501)}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Body, "reason")
	require.Equal(t, "resolved", admin.get("/console/conversations/desk-2").Text("[data-testid=status]"))

	// Another organization's admin: the ids do not exist.
	other := e.Bootstrap("Other Co", "pro")
	stranger := e.as(t, other.ID, member.Admin)
	require.Equal(t, 1, stranger.get("/console/inbox").Doc.Find("[data-testid=inbox-empty]").Length())
	for _, path := range []string{"/console/conversations/desk-1", "/console/conversations/desk-1/messages"} {
		require.Equal(t, http.StatusNotFound, stranger.get(path).Status, path)
	}
	p = stranger.post("/console/conversations/desk-1/reply", url.Values{"text": {"hi"}})
	require.Equal(t, http.StatusNotFound, p.Status)
	p = stranger.post("/console/conversations/desk-1/status", url.Values{"status": {"resolved"}})
	require.Equal(t, http.StatusNotFound, p.Status)
	require.Equal(t, http.StatusNotFound, stranger.post("/console/conversations/desk-1/delete", nil).Status)

	// Deleting a conversation: admins only, with its messages.
	require.Equal(t, http.StatusForbidden, viewer.post("/console/conversations/desk-2/delete", nil).Status)
	require.Zero(t, viewer.get("/console/conversations/desk-2").Doc.Find("[data-testid=delete-conversation]").Length())
	require.Equal(t, 1, admin.get("/console/conversations/desk-2").Doc.Find("[data-testid=delete-conversation]").Length())
	p = admin.post("/console/conversations/desk-2/delete", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/conversations", p.Header.Get("Location"))
	require.Equal(t, http.StatusNotFound, admin.get("/console/conversations/desk-2").Status)
	require.Equal(t, http.StatusOK, admin.get("/console/conversations/desk-1").Status, "only that one")

	// An organization with more agents than one listing holds: a row's
	// agent beyond them is still named (Desk is the oldest of 101).
	ctx := context.Background()
	require.NoError(t, e.App.Store.Tenant(ctx, org.ID, func(q *dbq.Queries) error {
		for i := range 100 {
			if _, err := q.CreateAgent(ctx, dbq.CreateAgentParams{
				OrgID: org.ID, ID: uuid.New(), Name: fmt.Sprintf("Agent %03d", i), Instructions: "i", Model: "gpt-4o-mini", Visibility: "private", Tools: []string{}, AllowedOrigins: []string{},
			}); err != nil {
				return err
			}
		}
		return nil
	}))
	p = admin.post("/console/conversations/desk-1/status", url.Values{"status": {"human_requested"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	row := admin.get("/console/inbox/list").Doc.Find(`[data-testid=inbox-row][data-id="desk-1"]`)
	require.Equal(t, 1, row.Length())
	require.Contains(t, row.Text(), "Desk")
}

// formValues are the hidden fields of the form s, as a browser sends them.
func formValues(s *goquery.Selection) url.Values {
	v := url.Values{}
	s.Find(`input[type=hidden]`).Each(func(_ int, in *goquery.Selection) {
		v.Add(in.AttrOr("name", ""), in.AttrOr("value", ""))
	})
	return v
}

// A transcript's forms act on the conversation the member read: deleted
// and started again under its id by another visitor meanwhile (ids are
// the clients' own), a reply typed for the first visitor does not reach
// the second, and neither a status change nor a deletion touches theirs.
func testInboxRecreatedConversation(t *testing.T, e *env) {
	org := e.Bootstrap("Same Id Co", "pro")
	admin := e.as(t, org.ID, member.Admin)
	agent := apiID(t, e, "/api/agents", org.Key, map[string]any{"name": "Desk", "instructions": "Help.", "visibility": "public"})
	chat(t, e, "", agent, "same-1", "ada", "I need a person")

	p := admin.get("/console/conversations/same-1")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	reply := formValues(p.Doc.Find("[data-testid=reply-form]"))
	reply.Set("text", "Ada, your order number is 1234")
	takeOver := formValues(p.Doc.Find("[data-testid=take-over]").Closest("form"))
	del := formValues(p.Doc.Find("[data-testid=delete-conversation]"))
	require.NotEmpty(t, reply.Get("created"), p.Body)

	// Ada's conversation goes; Bob starts one under the same id.
	r := e.api(t, "DELETE", "/api/v2/conversations/same-1", org.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	chat(t, e, "", agent, "same-1", "bob", "Hello")

	p = admin.post("/console/conversations/same-1/reply", reply)
	require.Equal(t, http.StatusConflict, p.Status, p.Body)
	require.Contains(t, p.Body, "started again")
	p = admin.post("/console/conversations/same-1/status", takeOver)
	require.Equal(t, http.StatusConflict, p.Status, p.Body)
	p = admin.post("/console/conversations/same-1/delete", del)
	require.Equal(t, http.StatusConflict, p.Status, p.Body)

	r = e.api(t, "GET", "/api/v2/conversations/same-1?agentId="+agent+"&visitorId=bob", "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.NotContains(t, string(r.Body), "1234", "Ada's reply reached Bob")
	p = admin.get("/console/conversations/same-1")
	require.Equal(t, "unresolved", p.Text("[data-testid=status]"), "Bob's conversation taken over")
	require.Zero(t, p.Doc.Find(`[data-testid=message][data-role=human]`).Length())

	// Read again, Bob's conversation's forms act on it.
	p = admin.get("/console/conversations/same-1")
	reply = formValues(p.Doc.Find("[data-testid=reply-form]"))
	reply.Set("text", "Hello Bob")
	p = admin.post("/console/conversations/same-1/reply", reply)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	r = e.api(t, "GET", "/api/v2/conversations/same-1?agentId="+agent+"&visitorId=bob", "", nil)
	require.Contains(t, string(r.Body), "Hello Bob")
	// A form's creation time that is not one is refused.
	p = admin.post("/console/conversations/same-1/status", url.Values{"status": {"resolved"}, "created": {"yesterday"}})
	require.Equal(t, http.StatusBadRequest, p.Status, p.Body)
}
