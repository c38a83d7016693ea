package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/plan"
)

// operatorClient signs in a new member of org and makes it an operator.
func (e *env) operatorClient(t *testing.T, org uuid.UUID) *client {
	t.Helper()
	c := e.as(t, org, member.Viewer)
	m, err := e.members.SetOperator(context.Background(), c.Member.Email, true)
	require.NoError(t, err)
	c.Member = m
	return c
}

// orgRow is the admin page's row of an organization.
func orgRow(p page, id uuid.UUID) *goquery.Selection {
	return p.Doc.Find(`[data-testid=org-row][data-org="` + id.String() + `"]`)
}

// rateLimit is the per-minute limit the API applies to key, as it says.
func (e *env) rateLimit(t *testing.T, key string) string {
	r := e.api(t, "GET", "/api/agents", key, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	return r.Header.Get("X-RateLimit-Limit")
}

func testAdminHidden(t *testing.T, e *env) {
	target := e.Bootstrap("Not yours", "pro")
	for _, role := range []member.Role{member.Viewer, member.Admin, member.Owner} {
		c := e.as(t, e.A.ID, role)
		p := c.get("/console/admin")
		require.Equal(t, http.StatusNotFound, p.Status, role)
		require.Equal(t, c.get("/console/no-such-page").Text("[data-testid=error]"), p.Text("[data-testid=error]"),
			"the operator page tells non-operators apart from a missing page")
		require.Zero(t, p.Doc.Find(`a[href="/console/admin"]`).Length())
		p = c.post("/console/admin/orgs/"+target.ID.String()+"/plan", url.Values{"plan": {"free"}})
		require.Equal(t, http.StatusNotFound, p.Status, role)
		p = c.post("/console/admin/plans/free", url.Values{"per_minute": {"1"}, "per_day": {"1"}})
		require.Equal(t, http.StatusNotFound, p.Status, role)
		p = c.post("/console/admin/plans/free/knowledge", url.Values{"knowledge_chunks": {"1"}})
		require.Equal(t, http.StatusNotFound, p.Status, role)
	}
	// Nothing changed: the organization's plan, and free's limits.
	require.Equal(t, "300", e.rateLimit(t, target.Key))
	require.NoError(t, e.App.Store.Tenant(context.Background(), target.ID, func(q *dbq.Queries) error {
		o, err := q.GetOrganization(context.Background(), target.ID)
		require.NoError(t, err)
		require.Equal(t, "pro", o.Plan)
		plans, err := q.ListPlans(context.Background())
		require.NoError(t, err)
		for _, p := range plans {
			if p.ID == "free" {
				require.Equal(t, int32(10), p.RequestsPerMinute)
			}
		}
		return nil
	}))
	// Signed out, the page is like any other: sign in first.
	p := e.anon(t).get("/console/admin")
	require.Equal(t, http.StatusSeeOther, p.Status)
}

func testAdmin(t *testing.T, e *env) {
	ctx := context.Background()
	op := e.operatorClient(t, e.A.ID)
	p := op.get("/console/admin")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, 1, p.Doc.Find(`header a[href="/console/admin"]`).Length())
	require.Equal(t, 1, orgRow(p, e.A.ID).Length(), "org A missing")
	require.Equal(t, 1, orgRow(p, e.B.ID).Length(), "org B missing")
	require.Equal(t, "Org B", strings.TrimSpace(orgRow(p, e.B.ID).Find("[data-testid=org-name]").Text()))
	require.Equal(t, 4, p.Doc.Find("[data-testid=plans] tbody tr").Length())

	// Tenant text is escaped.
	evilName := `<script>alert(1)</script>"><img src=x onerror=alert(2)>`
	evil := e.Bootstrap(evilName, "free")
	p = op.get("/console/admin")
	require.Equal(t, evilName, strings.TrimSpace(orgRow(p, evil.ID).Find("[data-testid=org-name]").Text()))
	require.Zero(t, p.Doc.Find("img").Length())
	require.NotContains(t, p.Body, "<script>alert")
	require.NotContains(t, p.Body, "<img src=x")

	// A plan lowered: the organization's keys above it come down too (the
	// API's limits with them), and the audit says so. (A fresh organization,
	// not B: the other tests share B's pro keys.)
	target := e.Bootstrap("Operator target", "pro")
	row := orgRow(op.get("/console/admin"), target.ID)
	require.Equal(t, "1", strings.TrimSpace(row.Find("[data-testid=org-keys]").Text()))
	require.Equal(t, "0", strings.TrimSpace(row.Find("[data-testid=org-members]").Text()))
	require.Equal(t, "300", e.rateLimit(t, target.Key))
	p = op.post("/console/admin/orgs/"+target.ID.String()+"/plan", url.Values{"plan": {"starter"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	p = op.get("/console/admin")
	require.Contains(t, p.Text("[data-testid=flash]"), "1 of its keys were lowered")
	require.Equal(t, "starter", orgRow(p, target.ID).Find("[data-testid=org-plan] option[selected]").AttrOr("value", ""))
	require.NoError(t, e.App.Store.Tenant(ctx, target.ID, func(q *dbq.Queries) error {
		keys, err := q.ListAPIKeys(ctx, target.ID)
		require.NoError(t, err)
		require.Len(t, keys, 1)
		require.Equal(t, "starter", keys[0].Plan)
		return nil
	}))
	require.Eventually(t, func() bool { return e.rateLimit(t, target.Key) == "60" }, 10*time.Second, 250*time.Millisecond,
		"the API still applies the old plan's limits")
	audit := p.Doc.Find("[data-testid=audit-row]").FilterFunction(func(_ int, s *goquery.Selection) bool {
		return strings.TrimSpace(s.Find("[data-testid=audit-target]").Text()) == target.ID.String()
	})
	require.Equal(t, 1, audit.Length())
	require.Equal(t, "organization.plan", strings.TrimSpace(audit.Find("[data-testid=audit-action]").Text()))
	require.Contains(t, audit.Text(), op.Member.Email)
	detail := audit.Find("[data-testid=audit-detail]").Text()
	require.Contains(t, detail, `"keys_lowered"`)
	require.Contains(t, detail, `"from": "pro"`)

	// Leaving enterprise clears its own limits, and a plan below the
	// knowledge it holds keeps it: the operator is told both.
	big := e.Bootstrap("Operator downgrade", "enterprise")
	require.NoError(t, account.SetLimits(ctx, e.App.Store, big.ID, plan.Limits{PerMinute: 7, PerDay: 70}))
	require.NoError(t, e.App.Store.TenantTx(ctx, big.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		store := uuid.New()
		if _, err := tx.Exec(ctx, `INSERT INTO datastores (org_id, id, name, embedding_model, embedding_dim) VALUES ($1, $2, 'kb', 'm', 3)`, big.ID, store); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO datasources (org_id, id, datastore_id, type, name, status, chunk_count)
			VALUES ($1, $2, $3, 'text', 'big', 'synced', 30000)`, big.ID, uuid.New(), store)
		return err
	}))
	p = op.post("/console/admin/orgs/"+big.ID.String()+"/plan", url.Values{"plan": {"free"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	flash := op.get("/console/admin").Text("[data-testid=flash]")
	require.Contains(t, flash, "Its own limits (7 a minute, 70 a day) were cleared")
	require.Contains(t, flash, "hold 30000 chunks, 5000 more than the 25000 the free plan allows: they are kept")

	// Bad input: 4xx with the field; another id: 404.
	p = op.post("/console/admin/orgs/"+target.ID.String()+"/plan", url.Values{"plan": {"platinum"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "plan")
	require.Equal(t, http.StatusNotFound, op.post("/console/admin/orgs/"+uuid.NewString()+"/plan", url.Values{"plan": {"free"}}).Status)
	require.Equal(t, http.StatusNotFound, op.post("/console/admin/orgs/nope/plan", url.Values{"plan": {"free"}}).Status)

	// Plan limits: enterprise (no other test's organization is on it) goes
	// up, and an enterprise key's limit follows; then back.
	ent := e.Bootstrap("Operator enterprise", "enterprise")
	require.Equal(t, "1000", e.rateLimit(t, ent.Key))
	setLimits := func(perMinute, perDay string) page {
		return op.post("/console/admin/plans/enterprise", url.Values{"per_minute": {perMinute}, "per_day": {perDay}})
	}
	p = setLimits("1234", "1000001")
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	t.Cleanup(func() { setLimits("1000", "1000000") })
	require.Eventually(t, func() bool { return e.rateLimit(t, ent.Key) == "1234" }, 10*time.Second, 250*time.Millisecond,
		"the API does not apply the plan's new limits")
	p = op.get("/console/admin")
	require.Equal(t, "1234", p.Doc.Find("[data-testid=plan-enterprise] input[name=per_minute]").AttrOr("value", ""))
	for _, bad := range []struct{ perMinute, perDay, field string }{
		{"abc", "10", "per_minute"}, {"0", "10", "per_minute"}, {"10", "-5", "per_day"}, {"10", "5", "per_day"},
		{"10", "99999999999", "per_day"},
	} {
		p = setLimits(bad.perMinute, bad.perDay)
		require.Equal(t, http.StatusBadRequest, p.Status, bad)
		require.Contains(t, p.Text("[data-testid=error]"), bad.field, bad)
	}
	require.Equal(t, http.StatusNotFound, op.post("/console/admin/plans/platinum", url.Values{"per_minute": {"1"}, "per_day": {"1"}}).Status)
	p = setLimits("1000", "1000000")
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)

	// A plan's knowledge quota: set and shown, and the organizations on it
	// see it; bad values name the field.
	setKnowledge := func(chunks string) page {
		return op.post("/console/admin/plans/starter/knowledge", url.Values{"knowledge_chunks": {chunks}})
	}
	p = setKnowledge("1234")
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	t.Cleanup(func() { setKnowledge("250000") })
	p = op.get("/console/admin")
	require.Equal(t, "1234", p.Doc.Find("[data-testid=plan-starter] input[name=knowledge_chunks]").AttrOr("value", ""))
	starter := e.Bootstrap("Starter knowledge", "starter")
	require.Contains(t, e.as(t, starter.ID, member.Viewer).get("/console/datastores").Text("[data-testid=knowledge-quota]"), "of the 1234 chunks")
	for _, bad := range []string{"abc", "0", "-1", "1000000000001"} {
		p = setKnowledge(bad)
		require.Equal(t, http.StatusBadRequest, p.Status, bad)
		require.Contains(t, p.Text("[data-testid=error]"), "knowledge_chunks", bad)
	}

	// The audit, latest first: both changes of enterprise's limits.
	p = op.get("/console/admin")
	var ent2 []string
	p.Doc.Find("[data-testid=audit-row]").Each(func(_ int, s *goquery.Selection) {
		if strings.TrimSpace(s.Find("[data-testid=audit-target]").Text()) == "enterprise" {
			ent2 = append(ent2, s.Find("[data-testid=audit-detail]").Text())
		}
	})
	require.Len(t, ent2, 2)
	require.Contains(t, ent2[0], `"to": {"per_day": 1000000, "per_minute": 1000}`)
	require.Contains(t, ent2[1], `"to": {"per_day": 1000001, "per_minute": 1234}`)
}
