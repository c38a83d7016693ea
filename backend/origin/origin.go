// Package origin decides which web pages may call a public agent or a
// published form from a browser without a key.
//
// The deployment's own allow-list (--cors-origin) is handled whole by the
// server's CORS middleware: a listed origin may call anything a key allows.
// Any other origin may reach only the paths of public agents (chat and a
// visitor's own conversation) and of published forms (GetForm and
// SubmitForm), and only without a key: the server answers its preflight
// without allowing Authorization, and marks the request (With). Once the
// agent or form is known, its service asks Admit (AdmitForm), which
// refuses an origin the owner did not list (nothing runs, nothing is
// stored) and otherwise grants the response the headers a browser needs
// to read it.
package origin

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/parleyhq/parley/backend/apperr"
)

// Check accepts "*", or an origin: http or https, a host (one leading "*."
// for any subdomain: https://*.example.com), an optional port, no path.
// It must read as a browser sends its Origin, or it would never match:
// the host in ASCII (an internationalized one in punycode, xn--…), and no
// port when it is the scheme's default (https://x.example, not :443).
func Check(o string) error {
	if o == "*" {
		return nil
	}
	bad := fmt.Errorf("%q is not an origin: give scheme://host[:port], e.g. https://app.example.com, https://*.example.com, or *", o)
	w := strings.Replace(o, "://*.", "://wildcard.", 1)
	u, err := url.Parse(w)
	// Nothing after the host and port, not even an empty query ("?"),
	// fragment ("#"), path ("/") or port (":").
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		strings.Contains(u.Host, "*") || !strings.EqualFold(u.Scheme+"://"+u.Host, w) || strings.HasSuffix(u.Host, ":") {
		return bad
	}
	for _, r := range u.Hostname() {
		if r >= utf8.RuneSelf {
			return fmt.Errorf("%q: write the host as browsers send it, in ASCII (an internationalized domain in punycode, xn--…)", o)
		}
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return bad
		}
		if u.Scheme == "http" && n == 80 || u.Scheme == "https" && n == 443 {
			return fmt.Errorf("%q: leave out the default port :%d of %s, as browsers do", o, n, u.Scheme)
		}
	}
	return nil
}

// CheckList checks an agent's or a form's allowed origins (Check), naming
// the first at fault allowed_origins[i], and returns them as stored: never
// nil, an empty list being a value.
func CheckList(in []string) ([]string, error) {
	for i, o := range in {
		if err := Check(o); err != nil {
			return nil, apperr.InvalidField(fmt.Sprintf("allowed_origins[%d]", i), "%v", err)
		}
	}
	if in == nil {
		return []string{}, nil
	}
	return in, nil
}

// Match reports whether origin (as a browser sends it) is one of patterns:
// "*", an exact origin (case-insensitive), or "scheme://*.domain[:port]"
// for any subdomain of domain (not domain itself).
func Match(patterns []string, origin string) bool {
	origin = strings.ToLower(origin)
	for _, p := range patterns {
		p = strings.ToLower(p)
		switch {
		case p == "*" || p == origin:
			return true
		case strings.Contains(p, "://*."):
			scheme, rest, _ := strings.Cut(p, "://*.")
			host, ok := strings.CutPrefix(origin, scheme+"://")
			if ok && strings.HasSuffix(host, "."+rest) && len(host) > len(rest)+1 {
				return true
			}
		}
	}
	return false
}

// Request is a browser request from an origin outside the deployment's
// allow-list, to a public agent's or a published form's path.
type Request struct {
	// Origin is the request's Origin header.
	Origin string
	// Grant adds the CORS response headers that let the page read the
	// reply; called once the agent or form accepts the origin.
	Grant func()
}

type key struct{}

// With marks ctx as carrying such a request.
func With(ctx context.Context, r *Request) context.Context {
	return context.WithValue(ctx, key{}, r)
}

// Of is the origin a request was marked with (With), and whether it was:
// a page on an origin the deployment does not list, which reaches a public
// agent or a published form only while its owner lists that origin.
func Of(ctx context.Context) (string, bool) {
	r, _ := ctx.Value(key{}).(*Request)
	if r == nil {
		return "", false
	}
	return r.Origin, true
}

// Admit lets the request in ctx reach agent (named in the error) when its
// origin is one of allowed, granting the response its CORS headers; a
// request the server did not mark (no Origin, the same origin, or a listed
// one) passes as it is. A refusal is Forbidden and names the origin.
func Admit(ctx context.Context, agent string, allowed []string) error {
	return admit(ctx, "agent", agent, allowed)
}

// AdmitForm is Admit for a published form's keyless GetForm and
// SubmitForm: form is named in the error.
func AdmitForm(ctx context.Context, form string, allowed []string) error {
	return admit(ctx, "form", form, allowed)
}

func admit(ctx context.Context, kind, id string, allowed []string) error {
	r, _ := ctx.Value(key{}).(*Request)
	if r == nil {
		return nil
	}
	if !Match(allowed, r.Origin) {
		return apperr.New(apperr.Forbidden, "%s %s does not accept browser calls from %s: its owner can add the origin to the %s's allowedOrigins", kind, id, r.Origin, kind)
	}
	if r.Grant != nil {
		r.Grant()
	}
	return nil
}
