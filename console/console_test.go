package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// env is the package's one running instance, shared by every subtest.
type env struct {
	*testenv.Env
	members *member.Service
}

// TestConsole runs every console test on one instance (one test server per
// package). Each file adds its tests to this table.
func TestConsole(t *testing.T) {
	// The tests' client stands for a trusted proxy, so that they can speak
	// from other addresses (client.from).
	e := &env{Env: testenv.New(t, testenv.WithWorkers, func(c *server.Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	})}
	e.members = &member.Service{Store: e.App.Store}
	tests := map[string]func(*testing.T, *env){
		"sign in and out":          testSignInAndOut,
		"sign out mid-request":     testSignOutDuringARequest,
		"passwords":                testPasswords,
		"security headers":         testSecurityHeaders,
		"cross-site posts refused": testCrossSite,
		"keys":                     testKeys,
		"key pages":                testKeyPages,
		"webhooks":                 testWebhooks,
		"viewers never see keys":   testViewerKeys,
		"escaping":                 testEscaping,
		"overview and plans":       testOverviewAndPlans,
		"members":                  testMembers,
		"members: escaping":        testMembersEscaping,
		"members: passwords":       testMemberPasswords,
		"members: invitations":     testInvitationsWithdrawn,
		"operator page":            testAdmin,
		"operator page: hidden":    testAdminHidden,
		"agents":                   testAgents,
		"agents: viewers read":     testAgentsViewer,
		"agents: other orgs":       testAgentsOtherOrg,
		"agents: escaping":         testAgentsEscaping,
		"agents: playground":       testPlayground,
		"agents: no key limits":    testPlaygroundLimits,
		"browser walk":             testBrowserWalk,
		"other organizations' ids": testOtherOrganizationsIDs,
		"datastores":               testDatastores,
		"datastore pages":          testDatastorePages,
		"conversations":            testConversations,
		"forms":                    testForms,
		"forms: viewers read":      testFormsViewer,
		"contacts":                 testContacts,
		"inbox and handoff":        testInbox,
		"inbox: id started again":  testInboxRecreatedConversation,
		"multipart form bound":     testMultipartFormBound,
		"password bytes":           testPasswordBytes,
		"datastores: long text":    testDatastoreLongText,
		"agents: warnings":         testAgentsWarnings,
		"agents: temperature step": testAgentsTemperatureStep,
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, e)
		})
	}
}

var seq atomic.Int64

// client is a browser-like client of one member: cookies kept, redirects
// not followed (tests look at them).
type client struct {
	t      *testing.T
	e      *env
	http   *http.Client
	Member *member.Member
	// from, when set, is the client's address as the trusted proxy in
	// front of the server names it (X-Forwarded-For).
	from string
}

// page is a response with its parsed HTML.
type page struct {
	Status int
	Header http.Header
	Body   string
	Doc    *goquery.Document
}

// Text is the trimmed text of the first element matching sel.
func (p page) Text(sel string) string { return strings.TrimSpace(p.Doc.Find(sel).First().Text()) }

// anon is a client signed in as nobody.
func (e *env) anon(t *testing.T) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, e: e, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// as signs a new member of org in with role, through an invitation link
// followed in the console (with a password, so that tests can sign in
// again).
func (e *env) as(t *testing.T, org uuid.UUID, role member.Role) *client {
	t.Helper()
	ctx := context.Background()
	email := fmt.Sprintf("m%d-%s@example.com", seq.Add(1), role)
	owner := &member.Member{OrgID: org, Role: member.Owner}
	token, err := e.members.InviteMember(ctx, owner, email, role)
	require.NoError(t, err)
	c := e.anon(t)
	p := c.post("/console/link", url.Values{"token": {token}, "invite": {"1"}, "password": {Password}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/", p.Header.Get("Location"))
	c.Member, err = e.members.SignInPassword(ctx, email, Password)
	require.NoError(t, err)
	return c
}

// Password is every test member's password.
const Password = "correct horse battery staple"

func (c *client) do(req *http.Request) page {
	c.t.Helper()
	if c.from != "" {
		req.Header.Set("X-Forwarded-For", c.from)
	}
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	doc, err := goquery.NewDocumentFromReader(bytes.NewReader(b))
	require.NoError(c.t, err)
	return page{Status: resp.StatusCode, Header: resp.Header, Body: string(b), Doc: doc}
}

// get fetches a console path.
func (c *client) get(path string) page {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.e.URL+path, nil)
	require.NoError(c.t, err)
	return c.do(req)
}

// post submits a form as the console's own page would (same origin).
func (c *client) post(path string, form url.Values) page {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.e.URL+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.e.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return c.do(req)
}

// postFile submits a multipart form with one file field.
func (c *client) postFile(path string, fields url.Values, fileField, fileName string, content []byte) page {
	c.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, vs := range fields {
		for _, v := range vs {
			require.NoError(c.t, mw.WriteField(k, v))
		}
	}
	fw, err := mw.CreateFormFile(fileField, fileName)
	require.NoError(c.t, err)
	_, err = fw.Write(content)
	require.NoError(c.t, err)
	require.NoError(c.t, mw.Close())
	req, err := http.NewRequest(http.MethodPost, c.e.URL+path, &body)
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Origin", c.e.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return c.do(req)
}

// api calls the REST API with a key and a JSON body.
func (e *env) api(t *testing.T, method, path, key string, body any) testenv.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return testenv.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}
