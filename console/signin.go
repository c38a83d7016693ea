package console

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/ratelimit"
)

// signinLimits bound password attempts per email from one address (and
// per member changing a password), with the limiter the API uses: enough
// for a person who mistypes, far too few to guess. signinEmailLimits bound
// an email's attempts from everywhere: a guesser spread over many
// addresses. signinIPLimits bound an address's attempts at any email,
// looser since an office or a NAT shares one.
//
// SECURITY: an email's own window is kept per address so that a stranger
// cannot lock its owner out: ten wrong passwords from elsewhere used to
// refuse the owner's right one for a minute, and 200 for the day. Now
// that takes the whole-email window, ten addresses' worth of attempts.
var (
	signinLimits      = plan.Limits{PerMinute: 10, PerDay: 200}
	signinEmailLimits = plan.Limits{PerMinute: 100, PerDay: 2000}
	signinIPLimits    = plan.Limits{PerMinute: 60, PerDay: 2000}
)

// refused sets the headers of a request res refused (Retry-After,
// X-RateLimit-*) and says when to try again: "in a minute" while the
// minute's window refuses, later once the day's does (its limit spent, a
// minute's wait would be refused again).
func refused(w http.ResponseWriter, res ratelimit.Result) string {
	now := time.Now()
	ratelimit.WriteHeaders(w.Header(), &res, now)
	switch wait := res.RetryAfter(now); {
	case wait <= 90*time.Second: // the minute's window (Retry-After is up to 61 s)
		return "in a minute"
	case wait <= 90*time.Minute:
		return fmt.Sprintf("in %d minutes", int((wait+time.Minute-1)/time.Minute))
	default:
		return fmt.Sprintf("in %d hours", int((wait+time.Hour-1)/time.Hour))
	}
}

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
	addr := auth.AddressKey(host) // an IPv6 client's /64, as the API counts it
	// SECURITY: brute force is limited per address, per email from that
	// address and per email; the message says nothing of which. The
	// address first, always: an email is the caller's to choose, and one
	// counted for an address past its limit would be a window kept for
	// nothing.
	for _, l := range [...]struct {
		key string
		lim plan.Limits
	}{
		{"signin-ip:" + addr, signinIPLimits},
		{"signin-email-from:" + addr + " " + norm, signinLimits},
		{"signin-email:" + norm, signinEmailLimits},
	} {
		res, err := c.Limits.Allow(ctx, l.key, l.lim)
		if err != nil {
			c.errorPage(w, r, err)
			return
		}
		if !res.Allowed {
			render(w, r, http.StatusTooManyRequests, signinPage(next, email, "Too many sign-in attempts; try again "+refused(w, res)+"."))
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
		pub := shown(err)
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
