package console

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/operator"
	"github.com/parleyhq/parley/backend/plan"
)

// operatorOnly admits platform operators; to everyone else the operator
// pages do not exist (404, as any unknown page).
func (c *Console) operatorOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// SECURITY: the console's operator check (the member row was read on
		// this request); backend/operator and the database check again.
		if v := viewOf(r.Context()); v == nil || !v.Member.Operator {
			c.errorPage(w, r, errNoPage)
			return
		}
		h(w, r)
	}
}

func (c *Console) operators() *operator.Service { return &operator.Service{Store: c.Store} }

func (c *Console) admin(w http.ResponseWriter, r *http.Request) {
	c.adminWith(w, r, http.StatusOK, "")
}

func (c *Console) adminWith(w http.ResponseWriter, r *http.Request, status int, formErr string) {
	v := viewOf(r.Context())
	ov, err := c.operators().Overview(r.Context(), v.Member)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, status, adminPage(v, ov, formErr))
}

// adminFailed shows a refused change on the admin page at its status.
func (c *Console) adminFailed(w http.ResponseWriter, r *http.Request, err error) {
	pub := shown(err)
	if pub.Code == apperr.Internal || pub.Code == apperr.NotFound {
		c.errorPage(w, r, err)
		return
	}
	c.adminWith(w, r, apperr.Lookup(pub.Code).HTTPStatus, pub.Message)
}

func (c *Console) adminOrgPlan(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := viewOf(ctx)
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.errorPage(w, r, apperr.New(apperr.NotFound, "organization not found"))
		return
	}
	ch, err := c.operators().SetOrgPlan(ctx, v.Member, id, r.PostFormValue("plan"))
	if err != nil {
		c.adminFailed(w, r, err)
		return
	}
	msg := fmt.Sprintf("%s is on the %s plan", ch.OrgName, ch.To)
	if ch.From == ch.To {
		msg += " already."
	} else {
		msg += fmt.Sprintf(" (was %s).", ch.From)
	}
	if n := len(ch.Lowered); n > 0 {
		msg += fmt.Sprintf(" %d of its keys were lowered to %s.", n, ch.To)
	}
	if l := ch.Cleared; l != nil {
		msg += fmt.Sprintf(" Its own limits (%s a minute, %s a day) were cleared; the audit keeps them.", orUnset(l.PerMinute), orUnset(l.PerDay))
	}
	if ch.Chunks > ch.MaxChunks {
		msg += fmt.Sprintf(" Its datastores hold %d chunks, %d more than the %d the %s plan allows: they are kept, but it adds no knowledge until under.",
			ch.Chunks, ch.Chunks-ch.MaxChunks, ch.MaxChunks, ch.To)
	}
	c.flash(ctx, msg)
	http.Redirect(w, r, "/console/admin", http.StatusSeeOther)
}

func (c *Console) adminPlanLimits(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := viewOf(ctx)
	p := r.PathValue("plan")
	var lim plan.Limits
	var err error
	if lim.PerMinute, err = limitField(r, "per_minute"); err != nil {
		c.adminFailed(w, r, err)
		return
	}
	if lim.PerDay, err = limitField(r, "per_day"); err != nil {
		c.adminFailed(w, r, err)
		return
	}
	if err := c.operators().SetPlanLimits(ctx, v.Member, p, lim); err != nil {
		c.adminFailed(w, r, err)
		return
	}
	c.flash(ctx, fmt.Sprintf("The %s plan allows %d requests a minute and %d a day.", p, lim.PerMinute, lim.PerDay))
	http.Redirect(w, r, "/console/admin", http.StatusSeeOther)
}

func (c *Console) adminPlanKnowledge(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := r.PathValue("plan")
	chunks, err := limitField(r, "knowledge_chunks")
	if err == nil {
		err = c.operators().SetPlanKnowledge(ctx, viewOf(ctx).Member, p, chunks)
	}
	if err != nil {
		c.adminFailed(w, r, err)
		return
	}
	c.flash(ctx, fmt.Sprintf("The %s plan's datastores hold up to %d chunks.", p, chunks))
	http.Redirect(w, r, "/console/admin", http.StatusSeeOther)
}

// orUnset is an optional limit as the flash shows it.
func orUnset(n *int32) string {
	if n == nil {
		return "unset"
	}
	return strconv.Itoa(int(*n))
}

// limitField reads a positive whole number (the service checks its range).
func limitField(r *http.Request, name string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(r.PostFormValue(name)), 10, 64)
	if err != nil || n <= 0 {
		return 0, apperr.InvalidField(name, "must be a positive whole number")
	}
	return n, nil
}
