package compat_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
)

// Bad input found by probing a running instance, each refused as 400 naming
// what is wrong (or, for HEAD on a stream, 405), on one instance.
func TestBadInput(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithFakeModels(fake))
	for name, test := range map[string]func(*testing.T, *testenv.Env){
		"HEAD on the event stream":         testHeadOnEventStream,
		"text that is not UTF-8":           testBodyNotUTF8,
		"message-level rules name":         testMessageRulesNameTheirField,
		"ports out of range":               testPortsOutOfRange,
		"unknown channel and streamFormat": testUnknownChannelAndStreamFormat,
		"map keys named as sent":           testMapKeysNamedAsSent,
		"array items named by index":       testArrayItemsNamedByIndex,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, e)
		})
	}
}

// HEAD, which Go's mux routes to a GET pattern, is refused on the event
// stream (405, Allow: GET) instead of holding the connection for the
// stream's hour: the keep-alive connection's next request is answered.
func testHeadOnEventStream(t *testing.T, e *testenv.Env) {
	r := e.Do("POST", "/api/v2/agent/"+create(t, e, e.A.Key, map[string]any{"name": "Head", "instructions": "x"}).ID+"/chat", e.A.Key,
		map[string]any{"query": "Hi", "conversationId": "conv-head"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	for _, path := range []string{"/api/v2/conversations/conv-head/events", "/v2/conversations/conv-head/events"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		host := strings.TrimPrefix(e.URL, "http://")
		_, err = io.WriteString(conn, "HEAD "+path+" HTTP/1.1\r\nHost: "+host+"\r\nAuthorization: Bearer "+e.A.Key+"\r\n\r\n"+
			"GET /healthz HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		require.NoError(t, err)
		rd := bufio.NewReader(conn)
		head, err := http.ReadResponse(rd, &http.Request{Method: http.MethodHead})
		require.NoError(t, err)
		require.Equal(t, http.StatusMethodNotAllowed, head.StatusCode, path)
		require.Equal(t, "GET", head.Header.Get("Allow"))
		health, err := http.ReadResponse(rd, &http.Request{Method: http.MethodGet})
		require.NoError(t, err, "%s: the next request on the connection is answered", path)
		body, err := io.ReadAll(health.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, health.StatusCode)
		require.Equal(t, "ok\n", string(body))
	}
	// GET still streams.
	req, err := http.NewRequest("GET", e.URL+"/api/v2/conversations/conv-head/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+e.A.Key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
}

// A body holding text that is not valid UTF-8 (bytes, or a lone surrogate
// escape) is refused, not stored with U+FFFD in its place.
func testBodyNotUTF8(t *testing.T, e *testenv.Env) {
	agent := create(t, e, e.A.Key, map[string]any{"name": "UTF-8", "instructions": "x"}).ID
	for _, body := range []string{
		"{\"name\":\"caf\xe9\"}",
		`{"name":"\ud800"}`,
		`{"name":"x\udc00y"}`,
		`{"name":"\ud83d\u0041"}`,
		`{"name":"\\\ud800"}`,
	} {
		for _, path := range []string{"/api/datastores", "/api/agents", "/api/v2/agent/" + agent + "/chat"} {
			r := e.Do("POST", path, e.A.Key, body)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s %q: %s", path, body, r.Body)
			b := r.Err(t)
			require.Equal(t, "body", b.Error.Field)
			require.Contains(t, b.Error.Message, "not valid UTF-8")
		}
	}
	// Pairs and escaped backslashes are text.
	r := e.Do("POST", "/api/datastores", e.A.Key, `{"name":"caf\u00e9 \ud83d\ude00 \\ud800"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct {
		Name string `json:"name"`
	}
	r.JSON(t, &ds)
	require.Equal(t, `café 😀 \ud800`, ds.Name)
}

// Rules on a whole datasource request name the field they are about, and
// their message has no empty field before it.
func testMessageRulesNameTheirField(t *testing.T, e *testenv.Env) {
	r := e.Do("POST", "/api/datastores", e.A.Key, map[string]any{"name": "Rules"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct {
		ID string `json:"id"`
	}
	r.JSON(t, &ds)
	for _, tc := range []struct {
		body, field, message string
	}{
		{`{"type":"text","text":"   "}`, "text", "text is required for a text datasource"},
		{`{"type":"web_page"}`, "url", "url is required for web_page and web_site datasources"},
		{`{"type":"web_site"}`, "url", "url is required for web_page and web_site datasources"},
		{`{"type":"qa","question":" ","answer":"a"}`, "question", "question is required for a qa datasource"},
		{`{"type":"qa","question":"q","answer":""}`, "answer", "answer is required for a qa datasource"},
		{`{"type":"qa"}`, "question", "question is required for a qa datasource; answer is required for a qa datasource"},
		// A field of another type is refused, not stored unused.
		{`{"type":"text","text":"t","url":"file:///etc/passwd"}`, "url", "url is only for web_page and web_site datasources"},
		{`{"type":"web_page","url":"https://example.com/","maxPages":5}`, "maxPages", "maxPages is only for a web_site datasource"},
		{`{"type":"web_site","url":"https://example.com/","answer":"a"}`, "answer", "answer is only for a qa datasource"},
		{`{"type":"qa","question":"q","answer":"a","text":"t"}`, "text", "text is only for a text datasource"},
		{`{"type":"text","text":"t","sourceUrl":"https://example.com/"}`, "sourceUrl", "sourceUrl is only for a qa datasource"},
		// A name is given or left empty for the default, never blank
		// (stored, it named the datasource and the answers' sources "  ").
		{`{"type":"text","text":"t","name":" \t "}`, "name", "name: must not be blank"},
	} {
		r := e.Do("POST", "/api/datastores/"+ds.ID+"/datasources", e.A.Key, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.body, r.Body)
		b := r.Err(t)
		require.Equal(t, tc.field, b.Error.Field, "%s: %s", tc.body, r.Body)
		require.Equal(t, tc.message, b.Error.Message, "%s", tc.body)
	}
}

// A URL's port must be 1 to 65535, wherever a user gives a URL Parley will
// fetch: webhooks, http_request endpoints and web pages.
func testPortsOutOfRange(t *testing.T, e *testenv.Env) {
	r := e.Do("POST", "/api/datastores", e.A.Key, map[string]any{"name": "Ports"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct {
		ID string `json:"id"`
	}
	r.JSON(t, &ds)
	for _, port := range []string{"99999", "0", "65536"} {
		// A public address, so that nothing but the port is at fault and
		// no name is looked up.
		url := "https://93.184.215.14:" + port + "/h"
		for _, tc := range []struct {
			path, field string
			body        any
		}{
			{"/api/webhooks", "url", map[string]any{"url": url, "events": []string{"conversation.created"}}},
			{"/api/agents", "toolSettings.http_request.endpoints[0].url", map[string]any{
				"name": "Ports", "instructions": "x", "tools": []string{"http_request"},
				"toolSettings": map[string]any{"http_request": map[string]any{"endpoints": []any{
					map[string]any{"name": "orders", "description": "Orders", "method": "GET", "url": url},
				}}},
			}},
			{"/api/datastores/" + ds.ID + "/datasources", "url", map[string]any{"type": "web_page", "url": url}},
		} {
			r := e.Do("POST", tc.path, e.A.Key, tc.body)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s %s: %s", tc.path, url, r.Body)
			b := r.Err(t)
			require.Equal(t, tc.field, b.Error.Field, "%s: %s", tc.path, r.Body)
			require.Contains(t, b.Error.Message, "port "+port+" ", "%s: %s", tc.path, r.Body)
		}
	}
}

// An unknown channel filter is refused as an unknown status is, not
// answered with an empty list; an unknown stream dialect is refused, not
// read as the default.
func testUnknownChannelAndStreamFormat(t *testing.T, e *testenv.Env) {
	for _, path := range []string{"/api/v2/conversations?channel=bogus", "/v2/conversations?channel=Website"} {
		r := e.Do("GET", path, e.A.Key, nil)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", path, r.Body)
		require.Equal(t, "channel", r.Err(t).Error.Field)
	}
	agent := create(t, e, e.A.Key, map[string]any{"name": "Channels", "instructions": "x"}).ID
	r := e.Do("GET", "/api/v2/agent/"+agent+"/conversations?channel=bogus", e.A.Key, nil)
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "channel", r.Err(t).Error.Field)
	for _, ch := range []string{"api", "website", "zapier"} {
		r := e.Do("GET", "/api/v2/conversations?channel="+ch, e.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", ch, r.Body)
	}

	chat := `{"query":"Hi","conversationId":"conv-format","streaming":true}`
	for _, format := range []string{"bogus", "TEXT", "json"} {
		for _, body := range []string{chat, strings.Replace(chat, "true", "false", 1)} {
			r := e.Do("POST", "/api/v2/agent/"+agent+"/chat?streamFormat="+format, e.A.Key, body)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s %s: %s", format, body, r.Body)
			b := r.Err(t)
			require.Equal(t, "streamFormat", b.Error.Field)
			require.Contains(t, b.Error.Message, "spec or text")
		}
	}
	for _, format := range []string{"spec", "text"} {
		resp := e.Post("/api/v2/agent/"+agent+"/chat?streamFormat="+format, map[string]string{"Authorization": "Bearer " + e.A.Key}, chat)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", format, b)
		want := map[string]string{"spec": `"type":"token"`, "text": `"type":"text"`}[format]
		require.True(t, bytes.Contains(b, []byte(want)), "%s: %s", format, b)
	}
}

// A refused value under a map key is named by the key the client sent:
// a snake_case key (a header's, a custom field's) is not turned into
// camelCase as the schema's field names are.
func testMapKeysNamedAsSent(t *testing.T, e *testenv.Env) {
	agent := create(t, e, e.A.Key, map[string]any{"name": "Keys", "instructions": "x"}).ID
	endpoint := func(headers map[string]string) map[string]any {
		return map[string]any{"toolSettings": map[string]any{"http_request": map[string]any{"endpoints": []any{
			map[string]any{"name": "orders", "description": "Orders", "method": "GET", "url": "https://93.184.215.14/", "headers": headers},
		}}}}
	}
	for _, tc := range []struct {
		method, path, field string
		body                any
	}{
		{"PUT", "/api/agents/" + agent, `toolSettings.http_request.endpoints[0].headers["my_key"]`,
			endpoint(map[string]string{"my_key": strings.Repeat("a", 5000)})},
		{"PUT", "/api/agents/" + agent, `toolSettings.http_request.endpoints[0].headers["X_Key"]`,
			endpoint(map[string]string{"X_Key": "a\r\nb"})},
		{"POST", "/api/v2/agent/" + agent + "/chat", `contact.customFields["my_key"]`,
			`{"query":"hi","conversationId":"keys","contact":{"email":"a@b.co","customFields":{"my_key":"a\u0000"}}}`},
		{"POST", "/api/v2/agent/" + agent + "/chat", `contact.customFields.plain[0]["snake_case"]`,
			`{"query":"hi","conversationId":"keys","contact":{"email":"a@b.co","customFields":{"plain":[{"snake_case":"a\u0000"}]}}}`},
	} {
		r := e.Do(tc.method, tc.path, e.A.Key, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.field, r.Body)
		b := r.Err(t)
		require.Equal(t, tc.field, b.Error.Field, "%s", r.Body)
		require.True(t, strings.HasPrefix(b.Error.Message, tc.field+":"), "%s", r.Body)
	}
}

// A value of the wrong type in an array's item is named with the item's
// index (attachments[1].size), not as if the array had one (attachments.size).
func testArrayItemsNamedByIndex(t *testing.T, e *testenv.Env) {
	agent := create(t, e, e.A.Key, map[string]any{"name": "Items", "instructions": "x"}).ID
	for _, path := range []string{"/api/v2/agent/" + agent + "/chat", "/api/agents/" + agent + "/query"} {
		r := e.Do("POST", path, e.A.Key,
			`{"query":"hi","conversationId":"items","attachments":[{"url":"https://93.184.215.14/a"},{"url":"https://93.184.215.14/b","size":"big"}]}`)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", path, r.Body)
		b := r.Err(t)
		require.Equal(t, "attachments[1].size", b.Error.Field, "%s", r.Body)
		require.Equal(t, "attachments[1].size: must be a whole number, not string", b.Error.Message)
	}
	r := e.Do("PUT", "/api/agents/"+agent, e.A.Key, `{"tools":["web_search",7]}`)
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "tools[1]", r.Err(t).Error.Field, "%s", r.Body)
}
