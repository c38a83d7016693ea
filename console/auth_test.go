package console_test

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/console"
)

func testSignInAndOut(t *testing.T, e *env) {
	// Signed out: / goes to the console, the console to the sign-in page.
	a := e.anon(t)
	p := a.get("/")
	require.Equal(t, http.StatusSeeOther, p.Status)
	require.Equal(t, "/console/", p.Header.Get("Location"))
	for _, path := range []string{"/console/", "/console/keys", "/console/agents"} {
		p = a.get(path)
		require.Equal(t, http.StatusSeeOther, p.Status, path)
		require.True(t, strings.HasPrefix(p.Header.Get("Location"), "/console/signin"), path)
	}
	require.Equal(t, http.StatusOK, a.get("/console/signin").Status)

	// A sign-in link: GET only asks, POST signs in, once.
	ctx := context.Background()
	org := e.Bootstrap("Links", "starter")
	linksOwner, err := e.members.CreateOwner(ctx, org.ID, "links-owner@example.com")
	require.NoError(t, err)
	token, err := e.members.SignInLink(ctx, org.ID, "links-owner@example.com")
	require.NoError(t, err)
	c := e.anon(t)
	p = c.get("/console/link?token=" + token)
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, http.StatusSeeOther, c.get("/console/").Status, "GET of a link signed in")
	p = c.post("/console/link", url.Values{"token": {token}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	p = c.get("/console/")
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, "Links", p.Text("[data-testid=org-name]"))
	require.Equal(t, "starter", p.Text("[data-testid=plan]"))

	again := e.anon(t)
	p = again.post("/console/link", url.Values{"token": {token}})
	require.Equal(t, http.StatusUnauthorized, p.Status, "a link worked twice")
	require.Contains(t, p.Text("[data-testid=error]"), "invalid, used or expired")
	p = again.post("/console/link", url.Values{"token": {"made-up"}})
	require.Equal(t, http.StatusUnauthorized, p.Status)

	// A lost password: a sign-in link's page sets a new one, and the old
	// one no longer signs in.
	require.NoError(t, e.members.ChangePassword(ctx, linksOwner, "", "the forgotten passphrase"))
	token, err = e.members.SignInLink(ctx, org.ID, "links-owner@example.com")
	require.NoError(t, err)
	lost := e.anon(t)
	p = lost.get("/console/link?token=" + token)
	require.Equal(t, 1, p.Doc.Find("input[name=password]").Length(), "a sign-in link's page offers a new password")
	p = lost.post("/console/link", url.Values{"token": {token}, "password": {"a brand new passphrase"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, http.StatusOK, lost.get("/console/").Status)
	p = e.anon(t).post("/console/signin", url.Values{"email": {"links-owner@example.com"}, "password": {"the forgotten passphrase"}})
	require.Equal(t, http.StatusUnauthorized, p.Status, "the old password still signs in")
	p = e.anon(t).post("/console/signin", url.Values{"email": {"links-owner@example.com"}, "password": {"a brand new passphrase"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Text("[data-testid=error]"))

	// Sign out ends the session on the server: the old cookie is dead.
	cookies := c.http.Jar.Cookies(mustURL(t, e.URL))
	require.NotEmpty(t, cookies)
	p = c.post("/console/signout", nil)
	require.Equal(t, http.StatusSeeOther, p.Status)
	replay := e.anon(t)
	replay.http.Jar.SetCookies(mustURL(t, e.URL), cookies)
	require.Equal(t, http.StatusSeeOther, replay.get("/console/").Status, "a signed-out session still works")

	// A removed member's session ends too.
	v := e.as(t, org.ID, member.Viewer)
	require.Equal(t, http.StatusOK, v.get("/console/").Status)
	// By the organization's owner: the service checks the remover's role
	// as the database holds it, not as a caller's copy says.
	_, err = e.members.Remove(ctx, linksOwner, v.Member.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusSeeOther, v.get("/console/").Status)
}

func testPasswords(t *testing.T, e *env) {
	c := e.as(t, e.A.ID, member.Admin)
	a := e.anon(t)
	p := a.post("/console/signin", url.Values{"email": {c.Member.Email}, "password": {Password}, "next": {"/console/plans"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/plans", p.Header.Get("Location"))
	require.Equal(t, http.StatusOK, a.get("/console/plans").Status)

	// A signed-out visit is sent to sign in with where it was going, its
	// query whole.
	p = e.anon(t).get("/console/conversations?agent=A&status=human_requested")
	require.Equal(t, http.StatusSeeOther, p.Status)
	loc, err := url.Parse(p.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "/console/signin", loc.Path)
	require.Equal(t, "/console/conversations?agent=A&status=human_requested", loc.Query().Get("next"))

	// An outside destination is not followed.
	b := e.anon(t)
	for _, next := range []string{"//evil.example/", "/console/..//evil.example/", "/console/%2e%2e//evil.example/", "/console/./../x",
		"/console/.\t./\t/evil.example/", "/console/\x7f"} { // a browser drops the tab: /console/..//evil.example/
		p = b.post("/console/signin", url.Values{"email": {c.Member.Email}, "password": {Password}, "next": {next}})
		require.Equal(t, "/console/", p.Header.Get("Location"), next)
	}

	// A sign-in body past a form's 1 MiB is refused before it is read
	// (Go's multipart parser would keep 32 MiB and write the rest to disk).
	var big bytes.Buffer
	mw := multipart.NewWriter(&big)
	require.NoError(t, mw.WriteField("email", c.Member.Email))
	fw, err := mw.CreateFormFile("file", "big.bin")
	require.NoError(t, err)
	_, err = fw.Write(bytes.Repeat([]byte("x"), 2<<20))
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	req, err := http.NewRequest(http.MethodPost, e.URL+"/console/signin", &big)
	require.NoError(t, err)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), "1048576 bytes")

	// Every posted form is read within 1 MiB before its handler runs: an
	// urlencoded one past it is 413, not a form of empty fields.
	p = c.post("/console/members/password", url.Values{"password": {strings.Repeat("x", 2<<20)}, "confirm": {"x"}})
	require.Equal(t, http.StatusRequestEntityTooLarge, p.Status, p.Body)

	// Wrong password and unknown email read the same.
	wrong := b.post("/console/signin", url.Values{"email": {c.Member.Email}, "password": {"not the password at all"}})
	unknown := b.post("/console/signin", url.Values{"email": {"nobody-here@example.com"}, "password": {Password}})
	require.Equal(t, http.StatusUnauthorized, wrong.Status)
	require.Equal(t, http.StatusUnauthorized, unknown.Status)
	require.Equal(t, wrong.Text("[data-testid=error]"), unknown.Text("[data-testid=error]"))

	// Brute force: an email is locked out after ten attempts a minute from
	// one address (an IPv6 address's /64), the right password too; its
	// owner elsewhere still signs in.
	target := e.as(t, e.A.ID, member.Viewer)
	for _, from := range [][]string{{"203.0.113.7"}, {"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::9"}} {
		var last page
		for i := range 11 {
			guesser := e.anon(t)
			guesser.from = from[i%len(from)]
			last = guesser.post("/console/signin", url.Values{"email": {target.Member.Email}, "password": {"guess guess guess"}})
		}
		require.Equal(t, http.StatusTooManyRequests, last.Status, from)
		require.Contains(t, last.Text("[data-testid=error]"), "try again in a minute")
		wait, err := strconv.Atoi(last.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After: %q", last.Header.Get("Retry-After"))
		require.True(t, wait >= 1 && wait <= 61, "Retry-After %d", wait)
		guesser := e.anon(t)
		guesser.from = from[0]
		p = guesser.post("/console/signin", url.Values{"email": {target.Member.Email}, "password": {Password}})
		require.Equal(t, http.StatusTooManyRequests, p.Status, "the right password got through a lock-out")
	}
	elsewhere := e.anon(t)
	elsewhere.from = "198.51.100.9"
	p = elsewhere.post("/console/signin", url.Values{"email": {target.Member.Email}, "password": {Password}})
	require.Equal(t, http.StatusSeeOther, p.Status, "a stranger's guesses locked the owner out: %s", p.Text("[data-testid=error]"))

	// An email's attempts from an address spent for the day: the page
	// says so, and Retry-After is the day's, not a minute after which the
	// right password would be refused again.
	spent := e.anon(t)
	spent.from = "192.0.2.44"
	for range 200 {
		_, err := e.App.Limits.Allow(context.Background(), "signin-email-from:192.0.2.44 "+target.Member.Email, plan.Limits{PerMinute: 1000, PerDay: 200})
		require.NoError(t, err)
	}
	p = spent.post("/console/signin", url.Values{"email": {target.Member.Email}, "password": {Password}})
	require.Equal(t, http.StatusTooManyRequests, p.Status)
	require.Regexp(t, `try again in \d+ hours`, p.Text("[data-testid=error]"))
	wait, err := strconv.Atoi(p.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.Greater(t, wait, 3600, "the day's window")

	// Invitations refuse short and common passwords, and leave the link usable.
	owner := &member.Member{OrgID: e.A.ID, Role: member.Owner}
	token, err := e.members.InviteMember(context.Background(), owner, "short-pw@example.com", member.Viewer)
	require.NoError(t, err)
	n := e.anon(t)
	for _, pw := range []string{"short", "password1234"} {
		p = n.post("/console/link", url.Values{"token": {token}, "invite": {"1"}, "password": {pw}})
		require.Equal(t, http.StatusBadRequest, p.Status, pw)
		require.Contains(t, p.Text("[data-testid=error]"), "password")
	}
	p = n.post("/console/link", url.Values{"token": {token}, "invite": {"1"}, "password": {"a much longer passphrase"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
}

func testSecurityHeaders(t *testing.T, e *env) {
	// Served over https (--public-url https://...), the console says so
	// for a year: its session cookie never goes in clear.
	cons := console.New(console.Deps{Store: e.App.Store, Members: e.members, Limits: ratelimit.NewMemory(), Secure: true})
	t.Cleanup(cons.Close)
	secure := cons.Handler()
	w := httptest.NewRecorder()
	secure.ServeHTTP(w, httptest.NewRequest("GET", "/console/signin", nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, "max-age=31536000", w.Header().Get("Strict-Transport-Security"))
	m := e.as(t, e.A.ID, member.Viewer).Member
	req := httptest.NewRequest("POST", "/console/signin", strings.NewReader(url.Values{"email": {m.Email}, "password": {Password}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w = httptest.NewRecorder()
	secure.ServeHTTP(w, req)
	require.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	cookies := w.Result().Cookies()
	require.NotEmpty(t, cookies, "the session signed in")
	for _, ck := range cookies {
		require.Equal(t, "__Host-parley_session", ck.Name, "taken only from this host, over https")
		require.True(t, ck.Secure)
		require.Equal(t, "/", ck.Path)
		require.Empty(t, ck.Domain)
	}

	c := e.as(t, e.A.ID, member.Admin)
	for _, path := range []string{"/console/signin", "/console/", "/console/keys", "/console/nope"} {
		cl := c
		if path == "/console/signin" {
			cl = e.anon(t)
		}
		p := cl.get(path)
		csp := p.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "frame-ancestors 'none'", path)
		require.Contains(t, csp, "script-src 'self' 'nonce-", path)
		require.NotContains(t, csp, "unsafe-inline", path)
		require.Equal(t, "nosniff", p.Header.Get("X-Content-Type-Options"), path)
		require.Equal(t, "same-origin", p.Header.Get("Referrer-Policy"), path)
		require.Empty(t, p.Header.Get("Strict-Transport-Security"), "not over plain http: %s", path)
		// Every script is a file of ours, carrying the page's nonce.
		nonce := strings.TrimSuffix(strings.SplitN(strings.SplitN(csp, "'nonce-", 2)[1], "'", 2)[0], "'")
		p.Doc.Find("script").Each(func(_ int, s *goquery.Selection) {
			src, _ := s.Attr("src")
			require.True(t, strings.HasPrefix(src, "/console/static/"), "inline or foreign script on %s", path)
			got, _ := s.Attr("nonce")
			require.Equal(t, nonce, got)
		})
	}
	require.Equal(t, http.StatusNotFound, c.get("/console/nope").Status)

	// Static files: content-hashed names, cached a year; others are 404.
	p := c.get("/console/signin")
	src, _ := p.Doc.Find("script").First().Attr("src")
	s := c.get(src)
	require.Equal(t, http.StatusOK, s.Status)
	require.Contains(t, s.Header.Get("Cache-Control"), "immutable")
	require.Equal(t, http.StatusNotFound, c.get("/console/static/htmx.min.js").Status)

	// The session cookie.
	a := e.anon(t)
	owner := &member.Member{OrgID: e.A.ID, Role: member.Owner}
	token, err := e.members.InviteMember(context.Background(), owner, "cookie@example.com", member.Viewer)
	require.NoError(t, err)
	p = a.post("/console/link", url.Values{"token": {token}, "invite": {"1"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	sc := p.Header.Get("Set-Cookie")
	require.Contains(t, sc, "HttpOnly")
	require.Contains(t, sc, "SameSite=Lax")
}

func testCrossSite(t *testing.T, e *env) {
	c := e.as(t, e.A.ID, member.Admin)
	req, err := http.NewRequest(http.MethodPost, e.URL+"/console/keys", strings.NewReader(url.Values{"name": {"stolen"}, "scopes": {"chat"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	p := c.do(req)
	require.Equal(t, http.StatusForbidden, p.Status)
	keys := c.get("/console/keys")
	require.NotContains(t, keys.Body, "stolen", "a cross-site post created a key")

	// An old browser without Sec-Fetch-Site: Origin decides.
	req, err = http.NewRequest(http.MethodPost, e.URL+"/console/signout", nil)
	require.NoError(t, err)
	req.Header.Set("Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, c.do(req).Status)
	require.Equal(t, http.StatusOK, c.get("/console/").Status, "a cross-site post signed the member out")
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

// A request that read the session before a sign-out and answers after it
// does not bring the session back. scs commits every session a request
// read (to move its idle timeout on), and the store's upsert re-inserted
// the row the sign-out had deleted, the late response setting the cookie
// again: a browser signed out while a page loaded in another tab stayed
// signed in, and a stolen cookie kept alive by one slow request after
// another outlived every sign-out.
func testSignOutDuringARequest(t *testing.T, e *env) {
	c := e.as(t, e.A.ID, member.Viewer)
	cookies := c.http.Jar.Cookies(mustURL(t, e.URL))
	require.NotEmpty(t, cookies)

	// A request whose body the server waits for: its session is read
	// before the handler asks for the body (Expect: 100-continue: the
	// client sends none until asked).
	form := "password=one+new+passphrase&confirm=another+passphrase"
	body, feed := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, e.URL+"/console/members/password", body)
	require.NoError(t, err)
	req.ContentLength = int64(len(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Expect", "100-continue")
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	slow := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	done := make(chan error, 1)
	go func() {
		resp, err := slow.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	// Taken once the server asked for the body: the session was read.
	_, err = feed.Write([]byte(form[:10]))
	require.NoError(t, err)

	p := c.post("/console/signout", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)

	_, err = feed.Write([]byte(form[10:]))
	require.NoError(t, err)
	require.NoError(t, feed.Close())
	require.NoError(t, <-done)

	replay := e.anon(t)
	replay.http.Jar.SetCookies(mustURL(t, e.URL), cookies)
	require.Equal(t, http.StatusSeeOther, replay.get("/console/").Status, "a request begun before the sign-out brought the session back")
}
