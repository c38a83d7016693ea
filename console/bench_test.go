package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/testenv"
)

// BenchmarkAgentsPage is the server's time to render GET /console/agents
// for an organization with 200 agents (the page shows the newest 100), as
// a signed-in admin: session, member and organization lookups, the agents'
// page, the usage report, the datastores of the create form, and the HTML.
// The handler is called in process, so no network or client time counts.
func BenchmarkAgentsPage(b *testing.B) {
	e := testenv.New(b, testenv.WithWorkers)
	ctx := context.Background()
	org := e.Bootstrap("Bench agents", plan.Enterprise)
	if err := account.SetLimits(ctx, e.App.Store, org.ID, plan.Limits{PerMinute: 2_000_000_000, PerDay: 2_000_000_000}); err != nil {
		b.Fatal(err)
	}
	for i := range 200 {
		r := e.Do("POST", "/api/agents", org.Key, map[string]any{
			"name": fmt.Sprintf("Agent %03d", i), "description": "Answers questions about the shop",
			"instructions": "Be brief.", "tools": []string{"datastore_query", "lead_capture"},
		})
		if r.Status != http.StatusCreated {
			b.Fatalf("creating agent %d: %d %s", i, r.Status, r.Body)
		}
	}

	// Sign an admin in through an invitation link, as a browser would.
	members := &member.Service{Store: e.App.Store}
	token, err := members.InviteMember(ctx, &member.Member{OrgID: org.ID, Role: member.Owner}, "bench@example.com", member.Admin)
	if err != nil {
		b.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	form := url.Values{"token": {token}, "invite": {"1"}, "password": {Password}}
	req, _ := http.NewRequest(http.MethodPost, e.URL+"/console/link", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		b.Fatalf("sign-in: %d", resp.StatusCode)
	}
	u, _ := url.Parse(e.URL)
	cookies := jar.Cookies(u)

	h := e.App.Handler()
	get := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/console/agents", nil)
		for _, c := range cookies {
			r.AddCookie(c)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := get()
	if w.Code != http.StatusOK || strings.Count(w.Body.String(), `data-testid="agent-row"`) != 100 {
		b.Fatalf("the page: %d, %d rows", w.Code, strings.Count(w.Body.String(), `data-testid="agent-row"`))
	}
	b.SetBytes(int64(w.Body.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if w := get(); w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
	}
}
