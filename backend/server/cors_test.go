package server_test

import (
	"context"
	"flag"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

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
	for _, bad := range []string{"app.example", "https://app.example/path", "ftp://x.example", "https://*.*.example", "https://u@x.example"} {
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
