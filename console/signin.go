package console

import (
	"net"
	"net/http"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/plan"
)

// signinLimits bound password attempts per email (and per member changing
// a password), with the limiter the API uses: enough for a person who
// mistypes, far too few to guess. signinIPLimits bound them per client
// address, looser since an office or a NAT shares one.
var (
	signinLimits   = plan.Limits{PerMinute: 10, PerDay: 200}
	signinIPLimits = plan.Limits{PerMinute: 60, PerDay: 2000}
)

func (c *Console) signinForm(w http.ResponseWriter, r *http.Request) {
	render(w, r, http.StatusOK, signinPage(safeNext(r.URL.Query().Get("next")), "", ""))
}

func (c *Console) signinSubmit(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if err := readForm(w, r); err != nil {
		c.errorPage(w, r, err)
		return
	}
	email, password, next := r.PostFormValue("email"), r.PostFormValue("password"), safeNext(r.PostFormValue("next"))
	norm, _ := member.NormalizeEmail(email)
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	// SECURITY: brute force is limited per address and per email; the
	// message says nothing of which. The address first, always (a map's
	// order is random): an email is the caller's to choose, and one counted
	// for an address past its limit would be a window kept for nothing.
	for _, l := range [...]struct {
		key string
		lim plan.Limits
	}{{"signin-ip:" + host, signinIPLimits}, {"signin-email:" + norm, signinLimits}} {
		res, err := c.Limits.Allow(ctx, l.key, l.lim)
		if err != nil {
			c.errorPage(w, r, err)
			return
		}
		if !res.Allowed {
			render(w, r, http.StatusTooManyRequests, signinPage(next, email, "Too many sign-in attempts; wait a minute and try again."))
			return
		}
	}
	m, err := c.Members.SignInPassword(ctx, email, password)
	if apperr.CodeOf(err) == apperr.Unauthenticated {
		render(w, r, http.StatusUnauthorized, signinPage(next, email, "Wrong email or password."))
		return
	}
	if err == nil {
		err = c.signIn(ctx, m)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) linkForm(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	render(w, r, http.StatusOK, linkPage(q.Get("token"), q.Get("invite") == "1", ""))
}

func (c *Console) linkSubmit(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if err := readForm(w, r); err != nil {
		c.errorPage(w, r, err)
		return
	}
	token, invite := r.PostFormValue("token"), r.PostFormValue("invite") == "1"
	m, err := c.Members.FollowLink(ctx, token, r.PostFormValue("password"))
	if err != nil {
		pub := apperr.Public(err)
		if pub.Code == apperr.Invalid || pub.Code == apperr.Unauthenticated || pub.Code == apperr.Conflict {
			render(w, r, apperr.Lookup(pub.Code).HTTPStatus, linkPage(token, invite, pub.Message))
			return
		}
		c.errorPage(w, r, err)
		return
	}
	if err := c.signIn(ctx, m); err != nil {
		c.errorPage(w, r, err)
		return
	}
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

func (c *Console) signout(w http.ResponseWriter, r *http.Request) {
	if err := c.sessions.Destroy(r.Context()); err != nil {
		c.errorPage(w, r, err)
		return
	}
	http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
}
