package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/member"
)

// Admins manage the organization's webhook endpoints in the console: every
// endpoint is listed (also one registered through the API), a new one's
// secret is shown once, and an endpoint is paused, resumed, tested, given
// a new secret, its delivery replayed, and deleted. Viewers get no page;
// another organization's endpoint is not found.
func testWebhooks(t *testing.T, e *env) {
	org := e.Bootstrap("Hooks Inc", "pro")
	admin := e.as(t, org.ID, member.Admin)
	p := admin.get("/console/webhooks")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, 1, p.Doc.Find("[data-testid=no-webhooks]").Length())
	require.Equal(t, http.StatusForbidden, e.as(t, org.ID, member.Viewer).get("/console/webhooks").Status)

	// Refusals name the field and keep what was typed.
	p = admin.post("/console/webhooks", url.Values{"url": {e.URL + "/hook"}, "events": {"form.submitted"}})
	require.Equal(t, http.StatusBadRequest, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=error]"), "url")
	require.Equal(t, e.URL+"/hook", p.Doc.Find("#webhook-url").AttrOr("value", ""))
	require.Equal(t, 1, p.Doc.Find(`input[name=events][value="form.submitted"][checked]`).Length())
	p = admin.post("/console/webhooks", url.Values{"url": {"https://hooks.invalid/parley"}})
	require.Equal(t, http.StatusBadRequest, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=error]"), "events")

	// One made here, its secret shown once; one made through the API.
	p = admin.post("/console/webhooks", url.Values{"url": {"https://hooks.invalid/parley"}, "description": {"CRM"},
		"events": {"form.submitted", "datasource.failed"}})
	require.Equal(t, http.StatusCreated, p.Status, p.Body)
	secret := p.Text("[data-testid=secret]")
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	r := e.Do("POST", "/api/webhooks", org.Key, `{"url":"https://other.invalid/x","events":["lead.created"]}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	p = admin.get("/console/webhooks")
	require.NotContains(t, p.Body, secret, "the secret was shown again")
	rows := map[string]string{}
	p.Doc.Find("[data-testid=webhook-row]").Each(func(_ int, s *goquery.Selection) {
		rows[strings.TrimSpace(s.Find("[data-testid=webhook-link]").Text())] = s.AttrOr("data-id", "")
	})
	require.Len(t, rows, 2)
	id := rows["https://hooks.invalid/parley"]
	require.NotEmpty(t, id)
	require.NotEmpty(t, rows["https://other.invalid/x"], "an endpoint made through the API is listed")

	show := "/console/webhooks/" + id
	p = admin.get(show)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, "active", p.Text("[data-testid=webhook-state]"))
	require.Equal(t, "form.submitted, datasource.failed", p.Text("[data-testid=webhook-events]"))
	require.Equal(t, 1, p.Doc.Find("[data-testid=no-deliveries]").Length())

	// Pause and resume.
	require.Equal(t, http.StatusSeeOther, admin.post(show+"/enabled", url.Values{"enabled": {"false"}}).Status)
	p = admin.get(show)
	require.Equal(t, "paused", p.Text("[data-testid=webhook-state]"))
	require.Contains(t, p.Text("[data-testid=flash]"), "paused")
	// Paused: no test to send (refused if posted), and the value must be
	// true or false.
	require.Zero(t, p.Doc.Find("[data-testid=test-webhook]").Length())
	p = admin.post(show+"/test", nil)
	require.GreaterOrEqual(t, p.Status, 400, p.Body)
	require.Less(t, p.Status, 500, p.Body)
	require.Contains(t, p.Body, "paused")
	require.Equal(t, http.StatusBadRequest, admin.post(show+"/enabled", url.Values{"enabled": {"maybe"}}).Status)
	require.Equal(t, "paused", admin.get(show).Text("[data-testid=webhook-state]"))
	require.Equal(t, http.StatusSeeOther, admin.post(show+"/enabled", url.Values{"enabled": {"true"}}).Status)
	require.Equal(t, "active", admin.get(show).Text("[data-testid=webhook-state]"))

	// A test event is a delivery; it can be sent again.
	require.Equal(t, http.StatusSeeOther, admin.post(show+"/test", nil).Status)
	p = admin.get(show)
	delivery := p.Doc.Find("[data-testid=delivery-row]").First().AttrOr("data-id", "")
	require.NotEmpty(t, delivery, p.Body)
	require.Contains(t, p.Text("[data-testid=deliveries]"), "webhook.test")
	require.Equal(t, http.StatusSeeOther, admin.post(show+"/deliveries/"+delivery+"/replay", nil).Status)
	require.Equal(t, 2, admin.get(show).Doc.Find("[data-testid=delivery-row]").Length())

	// A new secret, shown once.
	p = admin.post(show+"/rotate-secret", nil)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	rotated := p.Text("[data-testid=secret]")
	require.True(t, strings.HasPrefix(rotated, "whsec_"))
	require.NotEqual(t, secret, rotated)
	require.NotContains(t, admin.get(show).Body, rotated)

	// Another organization's endpoint: not found, and untouched.
	other := e.as(t, e.B.ID, member.Admin)
	require.Equal(t, http.StatusNotFound, other.get(show).Status)
	require.Equal(t, http.StatusNotFound, other.post(show+"/delete", nil).Status)
	require.Equal(t, http.StatusNotFound, other.post(show+"/enabled", url.Values{"enabled": {"false"}}).Status)
	require.Equal(t, "active", admin.get(show).Text("[data-testid=webhook-state]"))

	// Deleted: gone from the list, its page not found.
	p = admin.post(show+"/delete", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/webhooks", p.Header.Get("Location"))
	require.Equal(t, http.StatusNotFound, admin.get(show).Status)
	require.NotContains(t, admin.get("/console/webhooks").Body, "hooks.invalid")
}
