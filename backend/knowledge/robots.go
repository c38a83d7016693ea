package knowledge

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/temoto/robotstxt"

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
	// group is the rules for robotsAgent; nil allows everything (no
	// robots.txt, or a 4xx).
	group *robotstxt.Group
	// none allows nothing: a robots.txt that could not be read.
	none bool
}

// allowed reports whether the rules let the crawler fetch u: the longest
// Allow or Disallow path matching u's path and query decides, Allow on a
// tie, and no match allows.
func (r *robots) allowed(u *url.URL) bool {
	if r == nil {
		return true
	}
	if r.none {
		return false
	}
	if r.group == nil {
		return true
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	if u.RawQuery != "" {
		p += "?" + u.RawQuery
	}
	return r.group.Test(octets(p))
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

// parseRobots reads the rules of a robots.txt that apply to robotsAgent.
// Only the lines the crawler uses are given to the parser (user-agent,
// allow, disallow; rules before any user-agent line dropped): it refuses a
// whole file for one line it cannot read (a "Crawl-delay: 1s"), where
// RFC 9309 asks that such lines be ignored. Within a run of rules, allow
// lines come first: the parser takes the first of two matching rules of
// the same length, and RFC 9309 the allow.
func parseRobots(b []byte) *robots {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	var out bytes.Buffer
	var allows, disallows []string
	flush := func() {
		for _, l := range allows {
			out.WriteString(l)
		}
		for _, l := range disallows {
			out.WriteString(l)
		}
		allows, disallows = allows[:0], disallows[:0]
	}
	agent := false
	for line := range bytes.Lines(b) {
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		field, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v := strings.TrimSpace(string(value))
		switch strings.ToLower(strings.TrimSpace(string(field))) {
		case "user-agent":
			flush()
			agent = true
			out.WriteString("User-agent: " + v + "\n")
		case "allow":
			if agent {
				allows = append(allows, "Allow: "+octets(v)+"\n")
			}
		case "disallow":
			if agent {
				disallows = append(disallows, "Disallow: "+octets(v)+"\n")
			}
		}
	}
	flush()
	data, err := robotstxt.FromBytes(out.Bytes())
	if err != nil {
		// Not expected of the lines kept; a robots.txt that cannot be
		// read is taken as none, as RFC 9309 takes unparsable lines.
		return &robots{}
	}
	return &robots{group: data.FindGroup(robotsAgent)}
}
