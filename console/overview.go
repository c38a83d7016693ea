package console

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/usage"
)

var errNoPage = apperr.New(apperr.NotFound, "there is no such page")

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := viewOf(ctx)
	org, err := c.Accounts.GetOrganization(ctx, &parleyv1.GetOrganizationRequest{})
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	rep, err := usage.Of(ctx, c.Store, v.Member.OrgID, time.Now())
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	agents, err := c.Agents.ListAgents(ctx, &parleyv1.ListAgentsRequest{Limit: 100})
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	var keys []*parleyv1.ApiKey
	if v.Member.Can("admin") {
		if keys, err = c.usageKeys(ctx, org.GetUsage()); err != nil {
			c.errorPage(w, r, err)
			return
		}
	}
	render(w, r, http.StatusOK, overviewPage(v, org, rep, keys, agents.GetAgents()))
}

func money(usd float64) string { return fmt.Sprintf("$%.4f", usd) }

func peakTurns(rep *usage.Report) int64 {
	var p int64 = 1
	for _, d := range rep.Days {
		p = max(p, d.Turns)
	}
	return p
}

func barHeight(turns, peak int64) int64 {
	if turns == 0 {
		return 0
	}
	return max(2, turns*98/peak)
}

func headroomWidth(used, limit, width int64) int64 {
	if limit <= 0 {
		return 0
	}
	left := max(limit-used, 0)
	return left * width / limit
}

func agentTotals(rep *usage.Report, id string) usage.AgentTotals {
	u, err := uuid.Parse(id)
	if a := rep.ByAgent[u]; err == nil && a != nil {
		return *a
	}
	return usage.AgentTotals{}
}

// usageKeys reads the organization's keys, page after page, until it has
// every key the usage rows name: a working key may be older than a page of
// keys revoked since.
func (c *Console) usageKeys(ctx context.Context, usage []*parleyv1.KeyUsage) ([]*parleyv1.ApiKey, error) {
	missing := map[string]bool{}
	for _, u := range usage {
		missing[u.GetApiKeyId()] = true
	}
	var keys []*parleyv1.ApiKey
	req := &parleyv1.ListApiKeysRequest{}
	for len(missing) > 0 {
		list, err := c.Accounts.ListApiKeys(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, k := range list.GetApiKeys() {
			if missing[k.GetId()] {
				delete(missing, k.GetId())
				keys = append(keys, k)
			}
		}
		if list.GetNextCursor() == "" {
			break
		}
		req.Cursor = list.GetNextCursor()
	}
	return keys, nil
}

func keyName(keys []*parleyv1.ApiKey, id string) string {
	for _, k := range keys {
		if k.GetId() == id {
			return k.GetName()
		}
	}
	return id
}

func (c *Console) plans(w http.ResponseWriter, r *http.Request) {
	ps, err := c.Accounts.Plans(r.Context())
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, http.StatusOK, plansPage(viewOf(r.Context()), ps))
}
