package knowledge

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// robotsSite serves robots (a status and body) at /robots.txt and, at any
// other path, an HTML page linking to links; fetched counts requests by
// path (with its query).
type robotsSite struct {
	srv     *httptest.Server
	fetched sync.Map // path -> *atomic.Int64
}

func newRobotsSite(t *testing.T, status int, robots string, links ...string) *robotsSite {
	t.Helper()
	s := &robotsSite{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := s.fetched.LoadOrStore(r.URL.RequestURI(), &atomic.Int64{})
		n.(*atomic.Int64).Add(1)
		if r.URL.Path == "/robots.txt" {
			w.WriteHeader(status)
			fmt.Fprint(w, robots)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<html><body><p>Page %s of the handbook, about sourdough.</p>`, r.URL.RequestURI())
		for _, l := range links {
			fmt.Fprintf(w, `<a href="%s">link</a>`, l)
		}
		fmt.Fprint(w, `</body></html>`)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *robotsSite) hits(path string) int64 {
	n, ok := s.fetched.Load(path)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func docPaths(docs []Document, base string) []string {
	var out []string
	for _, d := range docs {
		out = append(out, strings.TrimPrefix(d.URL, base))
	}
	return out
}

// A crawl reads the site's robots.txt once and fetches no page it does not
// allow the crawler: the group naming Parley (in any case) rather than
// "*", the longest matching rule deciding, Allow on a tie, wildcards and
// queries matched; lines the parser cannot read (a Crawl-delay of "1s")
// do not lose the others.
func TestCrawlRobotsTxtDisallowedPagesNotFetched(t *testing.T) {
	t.Parallel()
	robots := strings.Join([]string{
		"\ufeff# the site's rules",
		"User-agent: *",
		"Disallow: /",
		"",
		"User-agent: otherbot",
		"User-agent: PARLEY",
		"Crawl-delay: 1s",
		"Disallow: /private/",
		"Allow: /private/public",
		"Disallow: /*.pdf$",
		"Disallow: /search?",
		"Disallow: /same",
		"Allow: /same",
	}, "\r\n")
	s := newRobotsSite(t, 200, robots,
		"/private/secret", "/private/public", "/guide.pdf", "/search?q=rye", "/search", "/same", "/about")
	docs, err := loopbackKnowledge().crawl(context.Background(), s.srv.URL+"/", 50)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"/", "/private/public", "/search", "/same", "/about"}, docPaths(docs, s.srv.URL))
	for _, p := range []string{"/private/secret", "/guide.pdf", "/search?q=rye"} {
		require.Zero(t, s.hits(p), "%s was fetched, which robots.txt disallows", p)
	}
	require.EqualValues(t, 1, s.hits("/robots.txt"), "robots.txt is read once a crawl")

	// Without a group of its own, the crawler keeps to "*"'s.
	s = newRobotsSite(t, 200, "User-agent: googlebot\nDisallow: /about\n\nUser-agent: *\nDisallow: /private\n", "/private/x", "/about")
	docs, err = loopbackKnowledge().crawl(context.Background(), s.srv.URL+"/", 50)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"/", "/about"}, docPaths(docs, s.srv.URL))
	require.Zero(t, s.hits("/private/x"))
}

// A robots.txt that is not there (a 404, a 403) allows every page; one the
// site cannot serve for now (a 5xx, a 429) allows none: the crawl fetches
// no page and fails, retried. One that disallows the start URL fails the
// crawl for good, its start page not fetched.
func TestCrawlRobotsTxtStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status    int
		robots    string
		read      bool
		permanent bool
	}{
		{404, "User-agent: *\nDisallow: /", true, false},
		{403, "", true, false},
		{503, "", false, false},
		{500, "", false, false},
		{429, "", false, false},
		{200, "User-agent: *\nDisallow: /", false, true},
		{200, "User-agent: parley\nDisallow: /\nAllow: /$", true, false},
	} {
		t.Run(fmt.Sprint(c.status, " ", c.robots), func(t *testing.T) {
			t.Parallel()
			s := newRobotsSite(t, c.status, c.robots, "/about")
			docs, err := loopbackKnowledge().crawl(context.Background(), s.srv.URL+"/", 10)
			if c.read {
				require.NoError(t, err)
				require.NotEmpty(t, docs)
				return
			}
			require.Error(t, err)
			require.Zero(t, s.hits("/"), "the start page was fetched")
			require.Contains(t, err.Error(), "robots.txt")
			_, perm := Permanent(err)
			require.Equal(t, c.permanent, perm, "%v", err)
		})
	}
}

// A robots.txt not reached within five redirects is taken as none there
// (RFC 9309, 2.3.1.2): every page is allowed. It failed the crawl for good.
func TestCrawlRobotsTxtRedirectLoopAllowsAll(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.Redirect(w, r, "/robots.txt?again="+r.URL.RawQuery+"x", http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><body><p>The handbook's first page, about sourdough.</p></body></html>`)
	}))
	t.Cleanup(srv.Close)
	docs, err := loopbackKnowledge().crawl(context.Background(), srv.URL+"/", 10)
	require.NoError(t, err)
	require.Len(t, docs, 1)
}

// robots.txt is fetched through the guard like any page: one that
// redirects to an address the guard refuses is not read (and the crawl,
// which cannot know the site's rules, reads nothing), and only its first
// 500 KiB are read.
func TestCrawlRobotsTxtThroughGuardAndBounded(t *testing.T) {
	t.Parallel()
	var private atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	other := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		private.Add(1)
		fmt.Fprint(w, "User-agent: *\nAllow: /\n")
	})}}
	other.Start()
	defer other.Close()
	var pages atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("/robots.txt", http.RedirectHandler(other.URL+"/robots.txt", http.StatusFound))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		pages.Add(1)
		fmt.Fprint(w, `<html><body><p>The handbook.</p></body></html>`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	k := New(nil, embed.Lexical{}, netguard.New(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}))
	_, err = k.crawl(context.Background(), srv.URL+"/", 10)
	require.Error(t, err)
	msg, perm := Permanent(err)
	require.True(t, perm, "%v", err)
	require.Contains(t, msg, "robots.txt")
	require.Contains(t, msg, "not a public address")
	require.Zero(t, private.Load(), "the guard let robots.txt redirect to a refused address")
	require.Zero(t, pages.Load())

	// Rules past the first 500 KiB are not read.
	robots := "User-agent: *\nDisallow: /early\n" + strings.Repeat("# padding padding padding padding\n", 20_000) + "Disallow: /late\n"
	require.Greater(t, len(robots), maxRobotsBytes)
	s := newRobotsSite(t, 200, robots, "/early", "/late")
	docs, err := loopbackKnowledge().crawl(context.Background(), s.srv.URL+"/", 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"/", "/late"}, docPaths(docs, s.srv.URL))
	require.Zero(t, s.hits("/early"))
}

// A page that redirects, within the site, to one robots.txt disallows is
// not read.
func TestCrawlRobotsTxtRedirectToDisallowed(t *testing.T) {
	t.Parallel()
	var hidden atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/robots.txt", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "User-agent: *\nDisallow: /hidden\n")
	})
	mux.Handle("/go", http.RedirectHandler("/hidden", http.StatusFound))
	mux.HandleFunc("/hidden", func(w http.ResponseWriter, r *http.Request) {
		hidden.Add(1)
		fmt.Fprint(w, `<html><body><p>Hidden page.</p></body></html>`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><body><p>The handbook.</p><a href="/go">go</a></body></html>`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	docs, err := loopbackKnowledge().crawl(context.Background(), srv.URL+"/", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"/"}, docPaths(docs, srv.URL))
}

func TestParseRobots(t *testing.T) {
	r := parseRobots([]byte("Disallow: /before-any-agent\nUser-agent: *\nDisallow: /p\nAllow: /p\nDisallow: /a/\nAllow: /a/b\nDisallow: /a/b/c\n"))
	for path, want := range map[string]bool{
		"/before-any-agent": true,
		"/p":                true, // a tie: allow
		"/px":               true,
		"/a/":               false,
		"/a/b":              true,
		"/a/b/c/d":          false,
		"/elsewhere":        true,
	} {
		u, err := url.Parse("http://example.com" + path)
		require.NoError(t, err)
		require.Equal(t, want, r.allowed(u), path)
	}
	// Paths compare as octets (RFC 9309 2.2.2): a rule in UTF-8 or with
	// lower-case escapes matches the URL's upper-case escapes.
	r = parseRobots([]byte("User-agent: *\nDisallow: /café\nDisallow: /%e2%82%ac\n"))
	for path, want := range map[string]bool{
		"/caf%C3%A9/menu": false,
		"/café/menu":      false,
		"/caf%c3%a9":      false,
		"/%E2%82%AC":      false,
		"/€":              false,
		"/cafe":           true,
	} {
		u, err := url.Parse("http://example.com" + path)
		require.NoError(t, err)
		require.Equal(t, want, r.allowed(u), path)
	}
	require.True(t, parseRobots(nil).allowed(&url.URL{Path: "/x"}))
	// A line ends with CR, LF or CRLF (RFC 9309 2.2): lines ending with CR
	// alone were read as one, of no rules, and everything was fetched.
	for _, eol := range []string{"\n", "\r\n", "\r"} {
		r = parseRobots([]byte(strings.Join([]string{"User-agent: *", "Disallow: /private", "Allow: /private/ok", ""}, eol)))
		require.False(t, r.allowed(&url.URL{Path: "/private/x"}), "%q", eol)
		require.True(t, r.allowed(&url.URL{Path: "/private/ok"}), "%q", eol)
		require.True(t, r.allowed(&url.URL{Path: "/public"}), "%q", eol)
	}
}

// Wildcard rules match from the path's start, and are as specific as the
// octets they are written with (RFC 9309 2.2.2): compiled as unanchored
// regular expressions, "Allow: /$" allowed every path ending in /, and
// "Allow: /*.css" (6 octets, a 8-character expression) beat "Disallow:
// /private" (8) on a tie.
func TestParseRobotsWildcards(t *testing.T) {
	for _, c := range []struct {
		robots string
		paths  map[string]bool
	}{
		{"User-agent: *\nDisallow: /\nAllow: /$\n", map[string]bool{
			"/": true, "/private/": false, "/docs/": false, "/x": false,
		}},
		{"User-agent: *\nDisallow: /private\nAllow: /*.css\n", map[string]bool{
			"/private/site.css": false, "/site.css": true, "/private": false,
		}},
		{"User-agent: *\nDisallow: /*.pdf$\nDisallow: /a*b\nDisallow: /end$\n", map[string]bool{
			"/guide.pdf": false, "/guide.pdf?x=1": true, "/x/guide.pdf": false,
			"/a/z/b": false, "/x/a/b": true, "/end": false, "/x/end": true, "/end/x": true,
		}},
		{"User-agent: *\nDisallow: *\n", map[string]bool{"/": false, "/x": false}},
		// An empty query is sent as written ("/search?"), and matched so.
		{"User-agent: *\nDisallow: /search?\n", map[string]bool{"/search?": false, "/search": true, "/search?q=1": false}},
		{"User-agent: Parley/1.0\nDisallow: /mine\n\nUser-agent: *\nDisallow: /\n", map[string]bool{
			"/mine": false, "/other": true,
		}},
		{"User-agent: P\nDisallow: /\n", map[string]bool{"/x": true}},
		{"User-agent: parley\nDisallow: /a\n\nUser-agent: other\nDisallow: /b\n\nUser-agent: parley\nDisallow: /c\n", map[string]bool{
			"/a": false, "/b": true, "/c": false,
		}},
	} {
		r := parseRobots([]byte(c.robots))
		for path, want := range c.paths {
			u, err := url.Parse("http://example.com" + path)
			require.NoError(t, err)
			require.Equal(t, want, r.allowed(u), "%q: %s", c.robots, path)
		}
	}
	require.False(t, (&robots{none: true}).allowed(&url.URL{Path: "/"}))
}

// A crawl stops at its context's end while it checks a page's links: a
// robots.txt of 500 KiB of wildcard rules takes a tenth of a second a
// link of 2 KiB (each rule matched), and a page's links were all checked,
// however many, before the crawl looked at the time again.
func TestCrawlRobotsTxtCostStopsWithContext(t *testing.T) {
	t.Parallel()
	robots := "User-agent: *\nDisallow: /x/\n" + strings.Repeat("Disallow: /*q*z$\n", (maxRobotsBytes-100)/17)
	var links []string
	for i := range 400 {
		links = append(links, fmt.Sprintf("/x/%d/%s", i, strings.Repeat("a", 2000)))
	}
	s := newRobotsSite(t, 200, robots, links...)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := loopbackKnowledge().crawl(ctx, s.srv.URL+"/", 50)
	requireStopped(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second, "the crawl ran on past its context's end")
}
