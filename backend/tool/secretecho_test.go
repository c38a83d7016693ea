package tool_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/testenv"
)

// An endpoint that echoes the request's headers (a debugging endpoint, an
// error page quoting the key it refused, httpbin's /headers) puts the
// owner's sealed header values in its response. The model never reads
// them: a page or document telling it to call the endpoint and repeat the
// answer would hand the owner's API key to a public agent's visitor, and
// the stored answer would keep it.
func TestHTTPRequestEchoedHeaderValuesDoNotReachTheModel(t *testing.T) {
	t.Parallel()
	const key, team, token = "sk-live-0123456789abcdef", "blue-team-secret", "eyJhbGciOi.bearer-token"
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			w.Header().Set("Location", "/to/"+r.Header.Get("X-Api-Key"))
			w.WriteHeader(http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "application/json; key="+r.Header.Get("X-Api-Key"))
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"invalid key `+r.Header.Get("X-Api-Key")+`","team":"`+r.Header.Get("X-Team")+
			`","auth":"`+r.Header.Get("Authorization")+`","token":"`+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+`"}`)
	}))
	t.Cleanup(echo.Close)
	fp := testenv.NewFakeProvider(t)
	calls := []llm.ToolCall{
		{ID: "echo", Name: "http_request", Arguments: `{"endpoint":"echo"}`},
		{ID: "moved", Name: "http_request", Arguments: `{"endpoint":"moved"}`},
	}
	fp.Reply = func(_ int, body map[string]any) testenv.FakeReply {
		r := req(body)
		if r.last()["role"] == "tool" {
			// A model steered by an injected page: it repeats what it read.
			return testenv.FakeReply{Tokens: []string{r.toolResult("echo"), r.toolResult("moved")}}
		}
		return testenv.FakeReply{ToolCalls: calls}
	}
	e := testenv.New(t, testenv.WithFakeModels(fp), fetchAllow("127.0.0.0/8"))
	headers := map[string]string{"X-Api-Key": key, "X-Team": team, "Authorization": "Bearer " + token}
	id := createAgent(t, e, e.A.Key, endpointsBody(
		map[string]any{"name": "echo", "url": echo.URL + "/echo", "headers": headers},
		map[string]any{"name": "moved", "url": echo.URL + "/moved", "headers": headers},
	))["id"].(string)
	r := e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"call them","conversationId":"echo-1"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	reqs := fp.Requests()
	require.Len(t, reqs, 2)
	second := req(reqs[1])
	got := second.toolResult("echo")
	require.Contains(t, got, "HTTP 401 Unauthorized", "the call was made")
	require.Contains(t, got, "invalid key", "the rest of the body is read")
	require.Contains(t, got, `"auth":"[redacted]","token":"[redacted]"`, "a whole value, and a word of it")
	for _, where := range []struct{ name, text string }{
		{"echo result", got}, {"redirect result", second.toolResult("moved")}, {"chat reply", string(r.Body)},
	} {
		require.NotContains(t, where.text, key, where.name)
		require.NotContains(t, where.text, team, where.name)
		require.NotContains(t, where.text, token, where.name)
	}
	hist := e.Do("GET", "/api/v2/conversations/echo-1", e.A.Key, nil)
	require.NotContains(t, string(hist.Body), key, "stored answer")
}

// An echo quotes a value as its language writes it: PHP's json_encode
// escapes "/" (which base64 keys hold), Go's encoder "<", ">" and "&", and
// a URL percent-encodes; none of these forms reaches the model either.
func TestHTTPRequestHeaderValuesEchoedEncodedDoNotReachTheModel(t *testing.T) {
	t.Parallel()
	const key, team = "c2stbGl2ZS0/0123+abc/def==", "blue&team<secret>"
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, tm := r.Header.Get("X-Api-Key"), r.Header.Get("X-Team")
		goTeam, _ := json.Marshal(tm)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"php":"`+strings.ReplaceAll(k, "/", `\/`)+`","go":`+string(goTeam)+
			`,"url":"https://api.example/?key=`+url.QueryEscape(k)+`","path":"/keys/`+url.PathEscape(k)+`"}`)
	}))
	t.Cleanup(echo.Close)
	fp := testenv.NewFakeProvider(t)
	fp.Reply = caller(llm.ToolCall{ID: "echo", Name: "http_request", Arguments: `{"endpoint":"echo"}`})
	e := testenv.New(t, testenv.WithFakeModels(fp), fetchAllow("127.0.0.0/8"))
	id := createAgent(t, e, e.A.Key, endpointsBody(
		map[string]any{"name": "echo", "url": echo.URL + "/echo", "headers": map[string]string{"X-Api-Key": key, "X-Team": team}},
	))["id"].(string)
	r := e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"call it","conversationId":"echo-enc"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	reqs := fp.Requests()
	require.Len(t, reqs, 2)
	got := req(reqs[1]).toolResult("echo")
	require.Contains(t, got, "HTTP 403 Forbidden", "the call was made")
	require.Contains(t, got, `{"php":"[redacted]","go":"[redacted]","url":"https://api.example/?key=[redacted]","path":"/keys/[redacted]"}`)
	for _, leak := range []string{"c2stbGl2ZS0", "0123", "blue", "secret"} {
		require.NotContains(t, got, leak)
	}
}

// The owner's query parameters are no more the model's to read than its
// header values (a redirect's Location is shown without its query): an
// endpoint that echoes the URL it was called at (httpbin's "url", an
// error quoting the key it refused) does not hand the model the owner's
// api_key.
func TestHTTPRequestEchoedOwnerQueryDoesNotReachTheModel(t *testing.T) {
	t.Parallel()
	const key = "k-0123456789abcdef"
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"url":"http://`+r.Host+r.URL.String()+`","args":{"api_key":"`+r.URL.Query().Get("api_key")+`"}}`)
	}))
	t.Cleanup(echo.Close)
	fp := testenv.NewFakeProvider(t)
	fp.Reply = caller(llm.ToolCall{ID: "echo", Name: "http_request", Arguments: `{"endpoint":"echo","query":{"page":"2"}}`})
	e := testenv.New(t, testenv.WithFakeModels(fp), fetchAllow("127.0.0.0/8"))
	id := createAgent(t, e, e.A.Key, endpointsBody(
		map[string]any{"name": "echo", "url": echo.URL + "/get?api_key=" + url.QueryEscape(key) + "&format=json"},
	))["id"].(string)
	r := e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"call it","conversationId":"echo-q"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	reqs := fp.Requests()
	require.Len(t, reqs, 2)
	got := req(reqs[1]).toolResult("echo")
	require.Contains(t, got, "HTTP 200 OK", "the call was made")
	require.Contains(t, got, `/get?api_key=[redacted]&format=json&page=2"`, "the rest of the URL is read")
	require.NotContains(t, got, key)
	require.NotContains(t, got, "0123456789abcdef")
}
