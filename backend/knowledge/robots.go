package knowledge

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/jimsmart/grobotstxt"

	"github.com/parleyhq/parley/backend/netguard"
)

// robotsAgent is the product token the crawler answers to in a site's
// robots.txt (its User-Agent is "Parley/1.0 (+…)"): the group of a
// "User-agent: Parley" line, else the group of "User-agent: *".
const robotsAgent = "Parley"

// maxRobotsBytes is the part of a robots.txt that is read, as Google
// reads it (RFC 9309 asks for at least 500 KiB): the rest is ignored.
const maxRobotsBytes = 500 << 10

// robots is what a site's robots.txt lets the crawler fetch.
type robots struct {
	// rules are those of robotsAgent's group; none allows everything (no
	// robots.txt, or a 4xx).
	rules []robotsRule
	// none allows nothing: a robots.txt that could not be read.
	none bool
}

// robotsRule is an Allow or Disallow line: its path (as octets) may hold
// the wildcards * (any run of characters) and a final $ (the end).
type robotsRule struct {
	allow bool
	path  string
}

// allowed reports whether the rules let the crawler fetch u: the longest
// Allow or Disallow path matching u's path and query from its start
// decides (its octets, wildcards included, as RFC 9309 2.2.2 counts them),
// Allow on a tie, and no match allows.
func (r *robots) allowed(u *url.URL) bool {
	if r == nil {
		return true
	}
	if r.none {
		return false
	}
	p := u.EscapedPath()
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // Matches takes a path from its root
	}
	if u.RawQuery != "" || u.ForceQuery {
		// "/search?" is fetched as written: "Disallow: /search?" applies.
		p += "?" + u.RawQuery
	}
	p = octets(p)
	best, allow := -1, true
	for _, rule := range r.rules {
		n := len(rule.path)
		// grobotstxt.Matches is Google's robots.txt matcher (RFC 9309's
		// reference): anchored at the path's start, * any run, a final $
		// the end, in time bounded by len(p) × len(rule.path). A library
		// that compiled rules into unanchored regular expressions let
		// "Allow: /$" allow every path ending in /.
		if n < best || n == best && !rule.allow || !robotsMatch(p, rule.path) {
			continue
		}
		best, allow = n, rule.allow
	}
	return allow
}

// robotsMatch reports whether a rule's pattern matches path (which
// starts with /): a plain prefix, or Google's matcher for wildcards.
func robotsMatch(path, pattern string) bool {
	if !strings.ContainsAny(pattern, "*$") {
		return strings.HasPrefix(path, pattern)
	}
	return grobotstxt.Matches(path, pattern)
}

// octets is a path as RFC 9309 compares them (2.2.2): every byte outside
// ASCII percent-encoded, and every escape in upper case, so that a rule
// written in UTF-8 ("Disallow: /café") or with lower-case escapes
// (/caf%c3%a9) matches the path a URL gives (/caf%C3%A9).
func octets(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 0x80:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(s[i+1 : i+3]))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// origin is the key of u's robots.txt: its scheme, host and port.
func origin(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + effectivePort(u)
}

// robotsOf reads the robots.txt of u's site (its scheme, host and port)
// through the guard, as pages are, reading at most maxRobotsBytes of it.
// As Google does (RFC 9309): a 4xx (none there) allows everything; a 429
// or a 5xx, like no answer at all, is an error, for which the caller
// fetches nothing of the site (a crawl it starts fails, retried when the
// failure may pass).
func (k *Knowledge) robotsOf(ctx context.Context, u *url.URL) (*robots, error) {
	ru := url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/robots.txt"}
	resp, err := k.Guard.Limited(maxRobotsBytes).Send(ctx, netguard.Request{Method: http.MethodGet, URL: ru.String()})
	if netguard.TooManyRedirects(err) {
		// Not reached within five redirects: unavailable, as a 4xx
		// (RFC 9309, 2.3.1.2), not a site that cannot be read for now.
		return &robots{}, nil
	}
	if err != nil {
		return nil, err
	}
	switch {
	case resp.Status == http.StatusTooManyRequests || resp.Status >= 500:
		return nil, &netguard.StatusError{Host: ru.Host, Code: resp.Status, Status: fmt.Sprintf("%d %s", resp.Status, http.StatusText(resp.Status))}
	case resp.Status < 200 || resp.Status >= 300:
		// 4xx: there is no robots.txt. (A 3xx the guard did not follow
		// has no Location: RFC 9309 takes it as none there too.)
		return &robots{}, nil
	}
	body := resp.Body
	if resp.Truncated {
		// The line cut in two is not read.
		if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
			body = body[:i+1]
		}
	}
	return parseRobots(body), nil
}

// parseRobots reads the rules of a robots.txt that apply to robotsAgent
// (RFC 9309 2.2.1): those of every group whose user-agent lines name it (in
// any case, "Parley/1.0" too), else those of every group of "*". A group
// is a run of user-agent lines and the rules after them; rules before any
// user-agent line, and lines other than user-agent, allow and disallow
// (a "Crawl-delay: 1s", a sitemap), are ignored.
func parseRobots(b []byte) *robots {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	// A line ends with CR, LF or CRLF (RFC 9309 2.2): a file whose lines
	// end with CR alone is not one line of no rules.
	b = bytes.ReplaceAll(b, []byte("\r"), []byte("\n"))
	var own, star []robotsRule
	named := false                 // a group names robotsAgent
	forOwn, forAny := false, false // the group being read names robotsAgent, "*"
	inRules := false               // the group being read has had a rule: a user-agent line starts another
	for line := range bytes.Lines(b) {
		line = bytes.TrimRight(line, "\n")
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		field, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v := strings.TrimSpace(string(value))
		switch f := strings.ToLower(strings.TrimSpace(string(field))); f {
		case "user-agent":
			if inRules {
				forOwn, forAny, inRules = false, false, false
			}
			if strings.EqualFold(productToken(v), robotsAgent) {
				forOwn, named = true, true
			}
			if v == "*" {
				forAny = true
			}
		case "allow", "disallow":
			inRules = true
			if v == "" {
				continue // no path: the line is ignored
			}
			if v[0] != '/' && v[0] != '*' {
				v = "/" + v
			}
			r := robotsRule{allow: f == "allow", path: octets(v)}
			if forOwn {
				own = append(own, r)
			}
			if forAny {
				star = append(star, r)
			}
		}
	}
	if named {
		return &robots{rules: own}
	}
	return &robots{rules: star}
}

// productToken is the product token a user-agent line names: its leading
// letters, underscores and hyphens ("Parley" of "Parley/1.0").
func productToken(v string) string {
	i := strings.IndexFunc(v, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || r == '_' || r == '-')
	})
	if i < 0 {
		return v
	}
	return v[:i]
}
