package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/member"
)

func contactEmails(p page) []string {
	var out []string
	p.Doc.Find("[data-testid=contact-row] [data-testid=contact-email]").Each(func(_ int, s *goquery.Selection) {
		out = append(out, s.Text())
	})
	return out
}

// Viewers read the organization's contacts (filtered, paged) and one
// contact with links to its conversations; another organization's contact
// is not found.
func testContacts(t *testing.T, e *env) {
	org := e.Bootstrap("Leads Inc", "pro")
	viewer := e.as(t, org.ID, member.Viewer)

	p := viewer.get("/console/contacts")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, 1, p.Doc.Find("[data-testid=no-contacts]").Length())

	agent := apiID(t, e, "/api/agents", org.Key, map[string]any{"name": "Sales", "instructions": "Sell."})
	withContact := func(conv string, c map[string]any) {
		t.Helper()
		r := e.api(t, "POST", "/api/v2/agent/"+agent+"/chat", org.Key, map[string]any{"query": "hi", "conversationId": conv, "contact": c})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	withContact("lead-1", map[string]any{"email": "ada@example.com", "firstName": "Ada " + xssScript, "customFields": map[string]any{"plan": xssImg}})
	withContact("lead-2", map[string]any{"email": "bob@example.com", "phoneNumber": "+33612345678"})
	withContact("lead-3", map[string]any{"email": "ada@example.com"})

	p = viewer.get("/console/contacts")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	noMarkup(t, p)
	require.Equal(t, []string{"bob@example.com", "ada@example.com"}, contactEmails(p))
	require.Equal(t, "+33612345678", p.Text(`[data-testid=contact-row] [data-testid=contact-phone]`))

	p = viewer.get("/console/contacts?q=ADA")
	require.Equal(t, []string{"ada@example.com"}, contactEmails(p))
	p = viewer.get("/console/contacts?email=bob@example.com")
	require.Equal(t, []string{"bob@example.com"}, contactEmails(p))
	p = viewer.get("/console/contacts?cursor=nope")
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "cursor")

	// One contact: its details, escaped, and its conversations.
	p = viewer.get("/console/contacts?q=ada")
	href, ok := p.Doc.Find("[data-testid=contact-link]").First().Attr("href")
	require.True(t, ok)
	p = viewer.get(href)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	noMarkup(t, p)
	require.Equal(t, "Ada "+xssScript, p.Text("[data-testid=contact-name]"))
	require.Contains(t, p.Text("[data-testid=contact-custom]"), "plan")
	var convs []string
	p.Doc.Find("[data-testid=conversation-link]").Each(func(_ int, s *goquery.Selection) { convs = append(convs, s.Text()) })
	require.Equal(t, []string{"lead-3", "lead-1"}, convs)
	require.Equal(t, "/console/conversations/lead-3", p.Doc.Find("[data-testid=conversation-link]").First().AttrOr("href", ""))

	// SECURITY: another organization's member does not find it, nor sees
	// it listed.
	other := e.as(t, e.B.ID, member.Viewer)
	p = other.get(href)
	require.Equal(t, http.StatusNotFound, p.Status, p.Body)
	require.NotContains(t, p.Body, "ada@example.com")
	p = other.get("/console/contacts?" + url.Values{"email": {"ada@example.com"}}.Encode())
	require.Equal(t, http.StatusOK, p.Status)
	require.Empty(t, contactEmails(p))
	require.Equal(t, http.StatusNotFound, viewer.get("/console/contacts/not-an-id").Status)

	// Deleting: admins only (viewers get no button and a 403), not another
	// organization's; the contact's conversations stay.
	require.Zero(t, p.Doc.Find("[data-testid=delete-contact]").Length())
	require.Zero(t, viewer.get(href).Doc.Find("[data-testid=delete-contact]").Length())
	require.Equal(t, http.StatusForbidden, viewer.post(href+"/delete", nil).Status)
	require.Equal(t, http.StatusNotFound, e.as(t, e.B.ID, member.Admin).post(href+"/delete", nil).Status)
	admin := e.as(t, org.ID, member.Admin)
	require.Equal(t, 1, admin.get(href).Doc.Find("[data-testid=delete-contact]").Length())
	p = admin.post(href+"/delete", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, http.StatusNotFound, admin.get(href).Status)
	require.Equal(t, []string{"bob@example.com"}, contactEmails(admin.get("/console/contacts")))
	require.Equal(t, http.StatusOK, admin.get("/console/conversations/lead-1").Status, "its conversations stay")
}
