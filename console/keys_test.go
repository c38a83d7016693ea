package console_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/member"
)

func testKeys(t *testing.T, e *env) {
	org := e.Bootstrap("Keys Inc", "starter")
	c := e.as(t, org.ID, member.Admin)
	p := c.get("/console/keys")
	require.Equal(t, http.StatusOK, p.Status)
	// Only the organization's plan and lower are offered.
	var offered []string
	p.Doc.Find("#key-plan option").Each(func(_ int, s *goquery.Selection) { offered = append(offered, s.AttrOr("value", "")) })
	require.Equal(t, []string{"free", "starter"}, offered)

	// A chat-only key on a lower plan, shown once, that works on the API.
	p = c.post("/console/keys", url.Values{"name": {"widget"}, "plan": {"free"}, "scopes": {"chat"}})
	require.Equal(t, http.StatusCreated, p.Status, p.Body)
	secret := p.Text("[data-testid=secret]")
	require.True(t, strings.HasPrefix(secret, "prly_"), secret)
	r := e.api(t, "GET", "/api/v2/agent/"+"00000000-0000-0000-0000-000000000000"+"/conversations", secret, nil)
	require.NotEqual(t, http.StatusUnauthorized, r.Status, "the new key is refused: %s", r.Body)
	r = e.api(t, "GET", "/api/agents", secret, nil)
	require.Equal(t, http.StatusForbidden, r.Status, "a chat-only key managed agents")
	list := c.get("/console/keys")
	require.NotContains(t, list.Body, secret, "the secret was shown again")
	var row *goquery.Selection
	list.Doc.Find("[data-testid=key-row]").Each(func(_ int, s *goquery.Selection) {
		if strings.TrimSpace(s.Find("td").First().Text()) == "widget" {
			row = s
		}
	})
	require.NotNil(t, row)
	require.Contains(t, row.Text(), "free")
	require.Contains(t, row.Text(), "active")

	// Above the organization's plan, blank names and unknown scopes: 4xx with the field.
	p = c.post("/console/keys", url.Values{"name": {"big"}, "plan": {"pro"}, "scopes": {"chat"}})
	require.Equal(t, http.StatusUnprocessableEntity, p.Status)
	require.NotEmpty(t, p.Text("[data-testid=error]"))
	p = c.post("/console/keys", url.Values{"name": {"  "}, "scopes": {"chat"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "name")
	p = c.post("/console/keys", url.Values{"name": {"x"}, "scopes": {"root"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "scopes")
	p = c.post("/console/keys", url.Values{"name": {"x"}, "scopes": {"chat"}, "expires": {"2001-01-01"}})
	require.Equal(t, http.StatusBadRequest, p.Status)

	// Revoke: the key stops working.
	id := ""
	c.get("/console/keys").Doc.Find("[data-testid=key-row] form").Each(func(_ int, s *goquery.Selection) {
		if a := s.AttrOr("action", ""); strings.Contains(s.Parent().Parent().Text(), "widget") {
			id = strings.TrimSuffix(strings.TrimPrefix(a, "/console/keys/"), "/revoke")
		}
	})
	require.NotEmpty(t, id)
	p = c.post("/console/keys/"+id+"/revoke", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	r = e.api(t, "GET", "/api/v2/agent/00000000-0000-0000-0000-000000000000/conversations", secret, nil)
	require.Equal(t, http.StatusUnauthorized, r.Status)

	// Another organization's key: not found for this one, untouched.
	other := e.as(t, e.B.ID, member.Admin)
	p = other.post("/console/keys/"+id+"/revoke", nil)
	require.Contains(t, []int{http.StatusNotFound, http.StatusForbidden}, p.Status)
	p = other.post("/console/keys/not-an-id/revoke", nil)
	require.Equal(t, http.StatusNotFound, p.Status)
}

func testViewerKeys(t *testing.T, e *env) {
	v := e.as(t, e.A.ID, member.Viewer)
	home := v.get("/console/")
	require.Equal(t, http.StatusOK, home.Status)
	require.Zero(t, home.Doc.Find(`a[href="/console/keys"]`).Length(), "a viewer is shown the keys page")
	require.Zero(t, home.Doc.Find("[data-testid=key-usage]").Length())
	require.Equal(t, http.StatusForbidden, v.get("/console/keys").Status)
	p := v.post("/console/keys", url.Values{"name": {"sneaky"}, "scopes": {"admin"}})
	require.Equal(t, http.StatusForbidden, p.Status)
	a := e.as(t, e.A.ID, member.Admin)
	require.NotContains(t, a.get("/console/keys").Body, "sneaky")
}

func testEscaping(t *testing.T, e *env) {
	org := e.Bootstrap(`<script>alert(1)</script>"><img src=x onerror=alert(2)>`, "pro")
	c := e.as(t, org.ID, member.Admin)
	p := c.post("/console/keys", url.Values{"name": {`"><img src=x onerror=alert(3)>`}, "scopes": {"chat"}})
	require.Equal(t, http.StatusCreated, p.Status, p.Body)
	for _, page := range []page{p, c.get("/console/"), c.get("/console/keys")} {
		require.NotContains(t, page.Body, "<script>alert")
		require.NotContains(t, page.Body, "<img src=x")
		require.Zero(t, page.Doc.Find("img").Length())
	}
	require.Equal(t, `<script>alert(1)</script>"><img src=x onerror=alert(2)>`, c.get("/console/").Text("[data-testid=org-name]"))
}

func testOverviewAndPlans(t *testing.T, e *env) {
	c := e.as(t, e.A.ID, member.Viewer)
	p := c.get("/console/")
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, 30, p.Doc.Find("[data-testid=chart] rect").Length())
	p = c.get("/console/plans")
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, 4, p.Doc.Find("[data-testid=plans] tbody tr").Length())
	require.Contains(t, p.Text("[data-testid=plan-pro]"), "300")
	require.Contains(t, p.Text("[data-testid=plan-pro]"), "100000")
	require.Equal(t, 1, p.Doc.Find("[data-testid=plan-pro] [data-testid=your-plan]").Length())
	require.Equal(t, "2500000", p.Text("[data-testid=plan-pro] [data-testid=knowledge-chunks]"))
}

// testKeyPages: the keys list comes a page of 100 at a time, with links to
// the older and the newest; revoked keys stay in their place, so a working
// key may be on a later page, and the overview still names it.
func testKeyPages(t *testing.T, e *env) {
	org := e.Bootstrap("Many Keys", "pro")
	admin := e.as(t, org.ID, member.Admin)
	ctx := context.Background()
	create := func(q *dbq.Queries, name string) (dbq.ApiKey, error) {
		id := uuid.New()
		h := sha256.Sum256(id[:])
		return q.CreateAPIKey(ctx, dbq.CreateAPIKeyParams{
			OrgID: org.ID, ID: id, Name: name, KeyHash: h[:], DisplayPrefix: "prly_x", Plan: "pro", Scopes: []string{"chat"},
		})
	}
	require.NoError(t, e.App.Store.Tenant(ctx, org.ID, func(q *dbq.Queries) error {
		_, err := create(q, "old working")
		return err
	}))
	// Made in one transaction, the revoked keys share a creation time:
	// their ids order them, and every one is on exactly one page.
	require.NoError(t, e.App.Store.Tenant(ctx, org.ID, func(q *dbq.Queries) error {
		for i := range 101 {
			k, err := create(q, fmt.Sprintf("revoked %03d", i))
			if err != nil {
				return err
			}
			if _, err := q.RevokeAPIKey(ctx, dbq.RevokeAPIKeyParams{OrgID: org.ID, ID: k.ID}); err != nil {
				return err
			}
		}
		return nil
	}))

	rows := func(p page) (names, revocable []string) {
		p.Doc.Find("[data-testid=key-row]").Each(func(_ int, s *goquery.Selection) {
			name := strings.TrimSpace(s.Find("td").First().Text())
			names = append(names, name)
			if s.Find("form").Length() > 0 {
				revocable = append(revocable, name)
			}
		})
		return names, revocable
	}
	p := admin.get("/console/keys")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	seen, revocable := rows(p)
	require.Len(t, seen, 100)
	require.Empty(t, revocable, "the newest 100 are revoked")
	require.Zero(t, p.Doc.Find("[data-testid=first-page]").Length())
	next, ok := p.Doc.Find("[data-testid=next-page]").Attr("href")
	require.True(t, ok, "no link to the older keys")
	p = admin.get(next)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	older, revocable := rows(p)
	require.Equal(t, []string{"old working", "bootstrap"}, older[1:], "the oldest last")
	require.Equal(t, []string{"old working", "bootstrap"}, revocable)
	require.Zero(t, p.Doc.Find("[data-testid=next-page]").Length())
	require.Equal(t, "/console/keys", p.Doc.Find("[data-testid=first-page]").AttrOr("href", ""))
	seen = append(seen, older...)
	slices.Sort(seen)
	require.Len(t, slices.Compact(seen), 103, "a key on both pages, or on none")

	p = admin.get("/console/keys?cursor=nope")
	require.Equal(t, http.StatusBadRequest, p.Status)

	// The overview names the working keys, wherever their page.
	p = admin.get("/console/")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	usage := p.Text("[data-testid=key-usage]")
	require.Contains(t, usage, "old working")
	require.Contains(t, usage, "bootstrap")
}
