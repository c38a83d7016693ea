package server_test

import (
	"context"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

const allowedOrigin = "https://app.example"

func preflight(t *testing.T, url, origin, method, headers string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodOptions, url, nil)
	require.NoError(t, err)
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", method)
	req.Header.Set("Access-Control-Request-Headers", headers)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

// withOrigin sends Origin on every call, as a browser does, and keeps the
// last response's headers.
type withOrigin struct {
	origin string
	got    http.Header
}

func (o *withOrigin) interceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Origin", o.origin)
			resp, err := next(ctx, req)
			if err == nil {
				o.got = resp.Header()
			} else if ce, ok := err.(*connect.Error); ok {
				o.got = ce.Meta()
			}
			return resp, err
		}
	})
}

func TestCORS(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, func(c *server.Config) { c.CORSOrigins = []string{allowedOrigin} })

	// Preflights, for an RPC and for REST paths; the header names lower case
	// and sorted, as browsers send them (the Fetch standard).
	for _, p := range []struct{ path, method, headers string }{
		{"/parley.v1.AgentService/ListAgents", "POST", "authorization,connect-protocol-version,content-type"},
		{"/parley.v1.AgentService/ListAgents", "POST", "authorization,content-type,x-grpc-web,x-user-agent"},
		{"/api/agents/0196f3a0-0000-7000-8000-000000000000", "DELETE", "authorization"},
		{"/api/v2/agent/0196f3a0-0000-7000-8000-000000000000/chat", "POST", "accept,content-type,x-request-id"},
	} {
		resp := preflight(t, e.URL+p.path, allowedOrigin, p.method, p.headers)
		require.Equal(t, http.StatusNoContent, resp.StatusCode, p.path)
		require.Equal(t, allowedOrigin, resp.Header.Get("Access-Control-Allow-Origin"), p.path)
		require.Equal(t, p.method, resp.Header.Get("Access-Control-Allow-Methods"), p.path)
		require.Equal(t, p.headers, strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")), p.path)
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Credentials"), "no credentials mode")
		require.Equal(t, "7200", resp.Header.Get("Access-Control-Max-Age"))

		if !strings.Contains(p.headers, "authorization") {
			continue // a public agent's path without a key: TestCORS/public_agents
		}
		refused := preflight(t, e.URL+p.path, "https://evil.example", p.method, p.headers)
		require.Empty(t, refused.Header.Get("Access-Control-Allow-Origin"), p.path)
		require.Empty(t, refused.Header.Get("Access-Control-Allow-Methods"), p.path)
	}
	// A header the API does not take is not allowed.
	resp := preflight(t, e.URL+"/api/agents", allowedOrigin, "GET", "x-secret-thing")
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Headers"))

	// Actual calls, over Connect and gRPC-Web: the allowed origin may read
	// the reply and the exposed headers; another gets no CORS headers.
	for _, opts := range [][]connect.ClientOption{nil, {connect.WithGRPCWeb()}} {
		o := &withOrigin{origin: allowedOrigin}
		c := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL,
			append(opts, connect.WithInterceptors(testenv.Bearer(e.A.Key), o.interceptor()))...)
		_, err := c.ListAgents(context.Background(), &parleyv1.ListAgentsRequest{})
		require.NoError(t, err)
		require.Equal(t, allowedOrigin, o.got.Get("Access-Control-Allow-Origin"))
		exposed := strings.ToLower(o.got.Get("Access-Control-Expose-Headers"))
		for _, h := range []string{"grpc-status", "grpc-message", "grpc-status-details-bin", "x-request-id",
			"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"} {
			require.Contains(t, exposed, h)
		}
		require.NotEmpty(t, o.got.Get("X-Ratelimit-Limit"))

		o.origin = "https://evil.example"
		_, err = c.ListAgents(context.Background(), &parleyv1.ListAgentsRequest{})
		require.NoError(t, err, "CORS is the browser's check; the server answers")
		require.Empty(t, o.got.Get("Access-Control-Allow-Origin"))
		require.Empty(t, o.got.Get("Access-Control-Expose-Headers"))
	}
	// REST, an error included: its Retry-After and code are readable too.
	req, _ := http.NewRequest("GET", e.URL+"/api/agents", nil)
	req.Header.Set("Origin", allowedOrigin)
	rresp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	rresp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, rresp.StatusCode)
	require.Equal(t, allowedOrigin, rresp.Header.Get("Access-Control-Allow-Origin"))

	t.Run("public agents", func(t *testing.T) { publicAgentOrigins(t, e) })
	t.Run("published forms", func(t *testing.T) { publishedFormOrigins(t, e) })
}

// A published form's owner lists the origins whose pages may read and
// submit it without a key, as a public agent's does; any other origin is
// refused before anything is stored.
func publishedFormOrigins(t *testing.T, e *testenv.Env) {
	const site = "https://shop.example"
	newForm := func(body map[string]any) string {
		t.Helper()
		body["name"], body["published"] = "Contact", true
		body["fields"] = []map[string]any{{"name": "email", "label": "Email", "type": "email", "required": true}}
		r := e.Do("POST", "/api/forms", e.A.Key, body)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var f struct{ ID string }
		r.JSON(t, &f)
		return f.ID
	}
	listed := newForm(map[string]any{"allowedOrigins": []string{site, "https://*.site.example"}})
	unlisted := newForm(map[string]any{})

	// Stored and shown to the owner (not to visitors); a bad origin is a
	// 400 naming it, nothing changed.
	r := e.Do("GET", "/api/forms/"+listed, e.A.Key, nil)
	require.Contains(t, string(r.Body), `"allowedOrigins":["https://shop.example","https://*.site.example"]`)
	r = e.Do("GET", "/api/forms/"+unlisted, e.A.Key, nil)
	require.Contains(t, string(r.Body), `"allowedOrigins":[]`)
	r = e.Do("GET", "/api/forms/"+listed, "", nil)
	require.NotContains(t, string(r.Body), "allowedOrigins")
	for _, bad := range []string{"shop.example", "https://shop.example/", "https://shop.example:443"} {
		r = e.Do("PUT", "/api/forms/"+listed, e.A.Key, map[string]any{"allowedOrigins": []string{site, bad}})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", bad, r.Body)
		require.Equal(t, "allowedOrigins[1]", r.Err(t).Error.Field, bad)
	}
	r = e.Do("POST", "/api/forms", e.A.Key, map[string]any{"name": "Bad", "allowedOrigins": []string{"ftp://x.example"}})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "allowedOrigins[0]", r.Err(t).Error.Field)
	r = e.Do("GET", "/api/forms/"+listed, e.A.Key, nil)
	require.Contains(t, string(r.Body), `"allowedOrigins":["https://shop.example","https://*.site.example"]`)

	// Preflights: any origin may ask to read or submit a form, never with
	// Authorization; its submissions and the listing are not a visitor's.
	for _, p := range []struct{ path, method string }{
		{"/api/forms/" + listed, "GET"}, {"/api/forms/" + listed, "POST"}, {"/forms/" + unlisted, "POST"},
		{"/parley.v1.FormService/GetForm", "POST"}, {"/parley.v1.FormService/SubmitForm", "POST"},
	} {
		resp := preflight(t, e.URL+p.path, "https://elsewhere.example", p.method, "content-type")
		require.Equal(t, http.StatusNoContent, resp.StatusCode, p.path)
		require.Equal(t, "https://elsewhere.example", resp.Header.Get("Access-Control-Allow-Origin"), p.path)
		resp = preflight(t, e.URL+p.path, "https://elsewhere.example", p.method, "authorization,content-type")
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), p.path)
	}
	for _, p := range []struct{ path, method string }{
		{"/api/forms/" + listed + "/submissions", "GET"}, {"/api/forms", "GET"}, {"/api/forms/" + listed, "PUT"},
		{"/api/forms/" + listed, "DELETE"}, {"/parley.v1.FormService/ListSubmissions", "POST"},
	} {
		resp := preflight(t, e.URL+p.path, "https://elsewhere.example", p.method, "content-type")
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), "%s %s is not a visitor's", p.method, p.path)
	}

	get := func(id, origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", e.URL+"/api/forms/"+id, nil)
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	submit := func(id, origin, visitor string) (*http.Response, string) {
		t.Helper()
		resp := e.Post("/api/forms/"+id, map[string]string{"Origin": origin},
			`{"values":{"email":"`+visitor+`@example.com"},"visitorId":"`+visitor+`"}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	submissions := func(id string) string {
		t.Helper()
		r := e.Do("GET", "/api/forms/"+id+"/submissions", e.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		return string(r.Body)
	}

	// The owner's origins, exact and by subdomain, may read and submit.
	for _, o := range []string{site, "https://eu.site.example"} {
		resp := get(listed, o)
		require.Equal(t, http.StatusOK, resp.StatusCode, o)
		require.Equal(t, o, resp.Header.Get("Access-Control-Allow-Origin"), o)
		resp, body := submit(listed, o, "v-ok")
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s: %s", o, body)
		require.Equal(t, o, resp.Header.Get("Access-Control-Allow-Origin"), o)
		require.Contains(t, strings.ToLower(resp.Header.Get("Access-Control-Expose-Headers")), "x-ratelimit-remaining")
	}
	// Another origin, or any foreign one for a form that lists none, is
	// refused: 403 naming the origin and the way in, and nothing stored.
	for _, tc := range []struct{ id, origin string }{
		{listed, "https://evil.example"}, {listed, "https://site.example"}, {listed, "http://shop.example"},
		{unlisted, site},
	} {
		resp := get(tc.id, tc.origin)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s", tc.id, tc.origin)
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
		resp, body := submit(tc.id, tc.origin, "v-refused")
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s: %s", tc.id, tc.origin, body)
		require.Contains(t, body, tc.origin)
		require.Contains(t, body, "allowedOrigins")
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
		require.NotContains(t, submissions(tc.id), "v-refused")
	}
	// The deployment's own origins reach every published form; servers (no
	// Origin) and same-origin pages are not concerned.
	for _, o := range []string{allowedOrigin, e.URL, ""} {
		resp, body := submit(unlisted, o, "v-dep")
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%q: %s", o, body)
	}

	// "*" opens the form to any page.
	r = e.Do("PUT", "/api/forms/"+unlisted, e.A.Key, map[string]any{"allowedOrigins": []string{"*"}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	resp, body := submit(unlisted, "https://any.example", "v-any")
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	require.Equal(t, "https://any.example", resp.Header.Get("Access-Control-Allow-Origin"))

	// Over Connect: granted or refused the same way.
	o := &withOrigin{origin: site}
	c := parleyv1connect.NewFormServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(o.interceptor()))
	_, err := c.GetForm(context.Background(), &parleyv1.GetFormRequest{Id: listed})
	require.NoError(t, err)
	require.Equal(t, site, o.got.Get("Access-Control-Allow-Origin"))
	_, err = c.SubmitForm(context.Background(), &parleyv1.SubmitFormRequest{FormId: listed, VisitorId: "v-connect",
		Values: map[string]*structpb.Value{"email": structpb.NewStringValue("c@example.com")}})
	require.NoError(t, err)
	require.Equal(t, site, o.got.Get("Access-Control-Allow-Origin"))
	o.origin = "https://evil.example"
	_, err = c.GetForm(context.Background(), &parleyv1.GetFormRequest{Id: listed})
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%v", err)
	require.Empty(t, o.got.Get("Access-Control-Allow-Origin"))
	_, err = c.SubmitForm(context.Background(), &parleyv1.SubmitFormRequest{FormId: listed, VisitorId: "v-connect-refused",
		Values: map[string]*structpb.Value{"email": structpb.NewStringValue("c@example.com")}})
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%v", err)
	require.Empty(t, o.got.Get("Access-Control-Allow-Origin"))
	require.NotContains(t, submissions(listed), "v-connect-refused")

	// With a key, the owner is not concerned by the form's origins.
	resp = e.Post("/api/forms/"+listed, map[string]string{"Origin": "https://evil.example", "Authorization": "Bearer " + e.A.Key},
		`{"values":{"email":"k@example.com"}}`)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}

// A public agent's owner lists the origins whose pages may call it without
// a key; any other origin is refused before anything runs, and no origin
// outside the deployment's list may send a key.
func publicAgentOrigins(t *testing.T, e *testenv.Env) {
	const widget = "https://widget.example"
	agent := func(body map[string]any) string {
		t.Helper()
		body["name"], body["instructions"] = "Helper", "Be brief."
		r := e.Do("POST", "/api/agents", e.A.Key, body)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var a struct {
			ID             string
			AllowedOrigins []string
		}
		r.JSON(t, &a)
		return a.ID
	}
	listed := agent(map[string]any{"visibility": "public", "allowedOrigins": []string{widget, "https://*.shop.example"}})
	unlisted := agent(map[string]any{"visibility": "public"})
	private := agent(map[string]any{"allowedOrigins": []string{"*"}})

	// Stored and shown; a bad origin is a 400 naming it, nothing changed.
	r := e.Do("GET", "/api/agents/"+listed, e.A.Key, nil)
	require.Contains(t, string(r.Body), `"allowedOrigins":["https://widget.example","https://*.shop.example"]`)
	// So is one written as no browser sends it, which would never match: a
	// default port, a host not in punycode, an empty query.
	for _, bad := range []string{"widget.example", "https://widget.example/", "https://a.*.example", "javascript:alert(1)",
		"https://widget.example:443", "https://bücher.example", "https://widget.example?"} {
		r = e.Do("PUT", "/api/agents/"+listed, e.A.Key, map[string]any{"allowedOrigins": []string{widget, bad}})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", bad, r.Body)
		require.Equal(t, "allowedOrigins[1]", r.Err(t).Error.Field, bad)
	}
	r = e.Do("GET", "/api/agents/"+listed, e.A.Key, nil)
	require.Contains(t, string(r.Body), `"allowedOrigins":["https://widget.example","https://*.shop.example"]`)

	chatPath := func(id string) string { return "/api/v2/agent/" + id + "/chat" }
	chat := func(id, origin, visitor string) *http.Response {
		t.Helper()
		h := map[string]string{}
		if origin != "" {
			h["Origin"] = origin
		}
		resp := e.Post(chatPath(id), h, `{"query":"When do you open?","conversationId":"c-`+visitor+`","visitorId":"`+visitor+`"}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Logf("%s from %q: %d %s", id, origin, resp.StatusCode, body)
		}
		return resp
	}

	// Preflights: any origin may ask for a public agent's paths, never with
	// Authorization (a key needs a deployment origin).
	for _, path := range []string{chatPath(listed), "/api/v2/conversations", "/parley.v1.ChatService/Chat"} {
		resp := preflight(t, e.URL+path, "https://elsewhere.example", "POST", "content-type")
		require.Equal(t, http.StatusNoContent, resp.StatusCode, path)
		require.Equal(t, "https://elsewhere.example", resp.Header.Get("Access-Control-Allow-Origin"), path)
		resp = preflight(t, e.URL+path, "https://elsewhere.example", "POST", "authorization,content-type")
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), path)
	}
	resp := preflight(t, e.URL+"/api/agents", "https://elsewhere.example", "GET", "content-type")
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), "management paths are not a visitor's")

	// The owner's origins, exact and by subdomain, may read the answer.
	for _, o := range []string{widget, "https://eu.shop.example"} {
		resp = chat(listed, o, "v-ok")
		require.Equal(t, http.StatusOK, resp.StatusCode, o)
		require.Equal(t, o, resp.Header.Get("Access-Control-Allow-Origin"), o)
		require.Contains(t, strings.ToLower(resp.Header.Get("Access-Control-Expose-Headers")), "x-ratelimit-remaining")
	}
	// Another origin is refused before the turn: 403 naming the origin, and
	// the visitor has no conversation.
	for _, tc := range []struct{ id, origin string }{
		{listed, "https://evil.example"}, {listed, "https://shop.example"}, {listed, "http://widget.example"},
		{unlisted, widget},
	} {
		r := e.Post(chatPath(tc.id), map[string]string{"Origin": tc.origin}, `{"query":"hi","conversationId":"c-refused","visitorId":"v-refused"}`)
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		require.Equal(t, http.StatusForbidden, r.StatusCode, "%s %s: %s", tc.id, tc.origin, body)
		require.Contains(t, string(body), tc.origin)
		require.Empty(t, r.Header.Get("Access-Control-Allow-Origin"))
		list := e.Do("GET", "/api/v2/conversations?agentId="+tc.id+"&visitorId=v-refused", "", nil)
		require.Equal(t, http.StatusOK, list.Status, "%s", list.Body)
		require.Contains(t, string(list.Body), `"conversations":[]`)
	}
	// The deployment's own origins reach every public agent; servers (no
	// Origin) and same-origin pages are not concerned.
	require.Equal(t, http.StatusOK, chat(unlisted, allowedOrigin, "v-dep").StatusCode)
	require.Equal(t, http.StatusOK, chat(unlisted, e.URL, "v-same").StatusCode)
	require.Equal(t, http.StatusOK, chat(unlisted, "", "v-server").StatusCode)
	// A private agent still needs a key, whatever it lists.
	require.Equal(t, http.StatusUnauthorized, chat(private, widget, "v-private").StatusCode)

	// "*" opens the agent to any page; the visitor reads its conversation
	// from there too.
	r = e.Do("PUT", "/api/agents/"+unlisted, e.A.Key, map[string]any{"allowedOrigins": []string{"*"}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, http.StatusOK, chat(unlisted, "https://any.example", "v-any").StatusCode)
	req, _ := http.NewRequest("GET", e.URL+"/api/v2/conversations?agentId="+unlisted+"&visitorId=v-any", nil)
	req.Header.Set("Origin", "https://any.example")
	list, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	list.Body.Close()
	require.Equal(t, http.StatusOK, list.StatusCode)
	require.Equal(t, "https://any.example", list.Header.Get("Access-Control-Allow-Origin"))

	// Over Connect: granted or refused the same way.
	o := &withOrigin{origin: widget}
	c := parleyv1connect.NewChatServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(o.interceptor()))
	_, err = c.Chat(context.Background(), &parleyv1.ChatRequest{AgentId: listed, Query: "hi", ConversationId: "c-connect", VisitorId: "v-connect"})
	require.NoError(t, err)
	require.Equal(t, widget, o.got.Get("Access-Control-Allow-Origin"))
	o.origin = "https://evil.example"
	_, err = c.Chat(context.Background(), &parleyv1.ChatRequest{AgentId: listed, Query: "hi", ConversationId: "c-connect", VisitorId: "v-connect"})
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%v", err)
	require.Empty(t, o.got.Get("Access-Control-Allow-Origin"))
}

// Without origins (the default) nothing changes: no CORS headers, and a
// preflight is not answered as one.
func TestNoCORSByDefault(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	resp := preflight(t, e.URL+"/parley.v1.AgentService/ListAgents", allowedOrigin, "POST", "authorization,content-type")
	require.NotEqual(t, http.StatusNoContent, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
}

func TestCORSOriginConfig(t *testing.T) {
	t.Setenv("PARLEY_CORS_ORIGINS", "https://a.example, https://*.b.example:8443")
	var c server.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	require.NoError(t, c.Err())
	require.Equal(t, []string{"https://a.example", "https://*.b.example:8443"}, c.CORSOrigins)
	require.NoError(t, fs.Parse([]string{"--cors-origin", "http://localhost:5173", "--cors-origin", "*"}))
	require.Equal(t, []string{"http://localhost:5173", "*"}, c.CORSOrigins, "flags replace the variable")
	for _, bad := range []string{"app.example", "https://app.example/path", "ftp://x.example", "https://*.*.example", "https://u@x.example", "https://app.example:443"} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		var c server.Config
		c.Flags(fs)
		require.Error(t, fs.Parse([]string{"--cors-origin", bad}), bad)
	}
	t.Setenv("PARLEY_CORS_ORIGINS", "https://ok.example,not an origin")
	c = server.Config{}
	c.Flags(flag.NewFlagSet("serve", flag.ContinueOnError))
	require.ErrorContains(t, c.Err(), "PARLEY_CORS_ORIGINS")
}
