package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"
	sse "github.com/tmaxmax/go-sse"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/testenv"
)

// agAPI is an agent as the REST API shows it.
type agAPI struct {
	ID, Name, Description, Instructions, Model, Visibility string
	HandoffMessage                                         string
	Temperature                                            float64
	Tools, Datastores, AllowedOrigins                      []string
}

func agGet(t *testing.T, e *env, key, id string) (agAPI, int) {
	t.Helper()
	r := e.api(t, "GET", "/api/agents/"+id, key, nil)
	var a agAPI
	if r.Status == http.StatusOK {
		r.JSON(t, &a)
	}
	return a, r.Status
}

// agNew creates an agent over the API and returns its id.
func agNew(t *testing.T, e *env, key string, body map[string]any) string {
	t.Helper()
	r := e.api(t, "POST", "/api/agents", key, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a agAPI
	r.JSON(t, &a)
	return a.ID
}

// agDatastore creates a datastore over the API; with text, a synced text
// datasource in it.
func agDatastore(t *testing.T, e *env, key, name, text string) string {
	t.Helper()
	r := e.api(t, "POST", "/api/datastores", key, map[string]any{"name": name})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var d struct{ ID string }
	r.JSON(t, &d)
	if text == "" {
		return d.ID
	}
	r = e.api(t, "POST", "/api/datastores/"+d.ID+"/datasources", key, map[string]any{"type": "text", "name": name + " notes", "text": text})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var src struct{ ID, Status, Error string }
	r.JSON(t, &src)
	require.Eventually(t, func() bool {
		r := e.api(t, "GET", "/api/datasources/"+src.ID, key, nil)
		r.JSON(t, &src)
		return src.Status == "synced" || src.Status == "error"
	}, 30*time.Second, 250*time.Millisecond)
	require.Equal(t, "synced", src.Status, src.Error)
	return d.ID
}

// agForm is a full create/edit form.
func agForm(name string, extra url.Values) url.Values {
	f := url.Values{
		"name": {name}, "description": {"Answers questions"}, "instructions": {"Be brief."},
		"model": {"gpt-4o-mini"}, "temperature": {"0.7"}, "visibility": {"private"},
	}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

func testAgents(t *testing.T, e *env) {
	org := e.Bootstrap("Agents Inc", "pro")
	c := e.as(t, org.ID, member.Admin)
	store := agDatastore(t, e, org.Key, "Handbook", "")

	p := c.get("/console/agents")
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, "0 agents", p.Text("[data-testid=agent-count]"))
	var models, tools, stores []string
	p.Doc.Find("#new-model option").Each(func(_ int, s *goquery.Selection) { models = append(models, s.AttrOr("value", "")) })
	p.Doc.Find("[data-testid=create-agent] input[name=tools]").Each(func(_ int, s *goquery.Selection) { tools = append(tools, s.AttrOr("value", "")) })
	p.Doc.Find("#new-datastores option").Each(func(_ int, s *goquery.Selection) { stores = append(stores, s.AttrOr("value", "")) })
	require.Equal(t, []string{"gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet"}, models)
	require.Equal(t, []string{"datastore_query", "web_search", "lead_capture", "http_request", "request_human"}, tools)
	require.Equal(t, []string{store}, stores)
	require.Equal(t, "gpt-4o-mini", p.Doc.Find("#new-model option[selected]").AttrOr("value", ""), "the API's default model is preselected")

	// Create with every field.
	p = c.post("/console/agents", agForm("Helper", url.Values{
		"description": {"Front desk"}, "instructions": {"Answer from the handbook."}, "model": {"gpt-4o"},
		"temperature": {"0.3"}, "tools": {"web_search", "lead_capture"}, "visibility": {"public"}, "datastores": {store},
		"handoffMessage": {"Our team replies within the hour."}, "allowedOrigins": {"https://widget.example,\n https://*.shop.example"},
	}))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	loc := p.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/console/agents/"), loc)
	id := strings.TrimPrefix(loc, "/console/agents/")
	a, status := agGet(t, e, org.Key, id)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, agAPI{ID: id, Name: "Helper", Description: "Front desk", Instructions: "Answer from the handbook.", Model: "gpt-4o",
		Visibility: "public", Temperature: 0.3, Tools: []string{"web_search", "lead_capture"}, Datastores: []string{store},
		HandoffMessage: "Our team replies within the hour.", AllowedOrigins: []string{"https://widget.example", "https://*.shop.example"}}, a)

	// The detail shows every field and the stats; the list links to it.
	p = c.get(loc)
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, "The agent was created.", p.Text("[data-testid=flash]"))
	require.Equal(t, "Helper", p.Text("[data-testid=agent-name]"))
	require.Equal(t, "Front desk", p.Text("[data-testid=agent-description]"))
	require.Equal(t, "gpt-4o", p.Text("[data-testid=agent-model]"))
	require.Equal(t, "0.3", p.Text("[data-testid=agent-temperature]"))
	require.Equal(t, "public", p.Text("[data-testid=agent-visibility]"))
	require.Equal(t, "web_search, lead_capture", p.Text("[data-testid=agent-tools]"))
	require.Equal(t, "Handbook", p.Text("[data-testid=agent-datastores]"))
	require.Equal(t, "Answer from the handbook.", p.Text("[data-testid=agent-instructions]"))
	require.Equal(t, "Our team replies within the hour.", p.Text("[data-testid=agent-handoff]"))
	require.Equal(t, "https://widget.example https://*.shop.example", p.Text("[data-testid=agent-origins]"))
	require.Equal(t, "0", p.Text("[data-testid=stat-conversations]"))
	// The edit form holds the current values.
	require.Equal(t, "Helper", p.Doc.Find("#edit-name").AttrOr("value", ""))
	require.Equal(t, "gpt-4o", p.Doc.Find("#edit-model option[selected]").AttrOr("value", ""))
	require.Equal(t, 2, p.Doc.Find("[data-testid=edit-agent] input[name=tools][checked]").Length())
	require.Equal(t, "public", p.Doc.Find("[data-testid=edit-agent] input[name=visibility][checked]").AttrOr("value", ""))
	require.Equal(t, store, p.Doc.Find("#edit-datastores option[selected]").AttrOr("value", ""))
	require.Equal(t, "Our team replies within the hour.", p.Doc.Find("#edit-handoff").AttrOr("value", ""))
	require.Equal(t, "https://widget.example https://*.shop.example", p.Doc.Find("#edit-origins").AttrOr("value", ""))
	require.NotEmpty(t, p.Doc.Find("[data-testid=delete-agent]").AttrOr("data-confirm", ""))
	require.Equal(t, 1, p.Doc.Find("[data-testid=playground]").Length())

	list := c.get("/console/agents")
	require.Equal(t, "1 agents", list.Text("[data-testid=agent-count]"))
	require.Equal(t, loc, list.Doc.Find("[data-testid=agent-link]").AttrOr("href", ""))
	require.Contains(t, list.Text("[data-testid=agent-row]"), "gpt-4o")
	require.Contains(t, list.Text("[data-testid=agent-row]"), "web_search, lead_capture")

	// Edit every field; unticked tools and datastores are cleared, and a
	// blank handoff message is the default again.
	p = c.post(loc, url.Values{
		"name": {"Helper 2"}, "description": {""}, "instructions": {"Be terse."}, "model": {"claude-3-5-sonnet"},
		"temperature": {"1"}, "visibility": {"private"},
	})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, loc, p.Header.Get("Location"))
	a, _ = agGet(t, e, org.Key, id)
	require.Equal(t, agAPI{ID: id, Name: "Helper 2", Instructions: "Be terse.", Model: "claude-3-5-sonnet",
		Visibility: "private", Temperature: 1, Tools: []string{}, Datastores: []string{},
		HandoffMessage: "A person will answer here shortly.", AllowedOrigins: []string{}}, a)
	saved := c.get(loc)
	require.Equal(t, "The agent was saved.", saved.Text("[data-testid=flash]"))
	require.Equal(t, "A person will answer here shortly.", saved.Text("[data-testid=agent-handoff]"))

	// Bad input: 4xx, the field named, the form kept, nothing changed.
	for _, tc := range []struct {
		form   url.Values
		status int
		field  string
	}{
		{agForm("Hot", url.Values{"temperature": {"2"}}), http.StatusBadRequest, "temperature"},
		{agForm("Hot", url.Values{"temperature": {"warm"}}), http.StatusBadRequest, "temperature"},
		{agForm("Hot", url.Values{"temperature": {"NaN"}}), http.StatusBadRequest, "temperature"},
		{agForm("   ", nil), http.StatusBadRequest, "name"},
		{agForm("Hot", url.Values{"instructions": {" "}}), http.StatusBadRequest, "instructions"},
		{agForm("Hot", url.Values{"model": {"gpt-5"}}), http.StatusBadRequest, "model"},
		{agForm("Hot", url.Values{"tools": {"shell"}}), http.StatusBadRequest, "tools"},
		{agForm("Hot", url.Values{"visibility": {"secret"}}), http.StatusBadRequest, "visibility"},
		{agForm("Hot", url.Values{"allowedOrigins": {"https://ok.example widget.example"}}), http.StatusBadRequest, "allowed_origins[1]"},
		{agForm("Hot", url.Values{"datastores": {"00000000-0000-0000-0000-000000000001"}}), http.StatusNotFound, "datastore"},
	} {
		p = c.post("/console/agents", tc.form)
		require.Equal(t, tc.status, p.Status, "%v: %s", tc.form, p.Text("[data-testid=error]"))
		require.Contains(t, p.Text("[data-testid=error]"), tc.field, "%v", tc.form)
		require.Equal(t, strings.TrimSpace(tc.form.Get("name")), p.Doc.Find("#new-name").AttrOr("value", ""), "the form was not kept")

		edit := url.Values{}
		for k, v := range tc.form {
			edit[k] = v
		}
		p = c.post(loc, edit)
		require.Equal(t, tc.status, p.Status, "edit %v: %s", tc.form, p.Text("[data-testid=error]"))
		require.Contains(t, p.Text("[data-testid=error]"), tc.field)
		require.Equal(t, "Helper 2", p.Text("[data-testid=agent-name]"), "the page shows the stored agent")
	}
	// A blank temperature on edit is refused (every field is set).
	p = c.post(loc, agForm("Helper 3", url.Values{"temperature": {""}}))
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "temperature")
	// Another organization's datastore cannot be attached.
	theirs := agDatastore(t, e, e.B.Key, "Theirs", "")
	p = c.post(loc, agForm("Helper 3", url.Values{"datastores": {theirs}}))
	require.Equal(t, http.StatusNotFound, p.Status, "as an id that exists nowhere")
	require.Equal(t, fmt.Sprintf("datastore %q not found", theirs), p.Text("[data-testid=error]"))
	after, _ := agGet(t, e, org.Key, id)
	require.Equal(t, a, after, "a refused edit changed the agent")
	require.Equal(t, "1 agents", c.get("/console/agents").Text("[data-testid=agent-count]"))
	require.Equal(t, http.StatusBadRequest, c.get("/console/agents?page=0").Status)
	require.Equal(t, http.StatusBadRequest, c.get("/console/agents?page=x").Status)

	// Delete.
	p = c.post(loc+"/delete", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/agents", p.Header.Get("Location"))
	_, status = agGet(t, e, org.Key, id)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, http.StatusNotFound, c.get(loc).Status)
	require.Equal(t, http.StatusNotFound, c.post(loc+"/delete", nil).Status)
	require.Equal(t, http.StatusNotFound, c.get("/console/agents/not-an-id").Status)
}

func testAgentsViewer(t *testing.T, e *env) {
	id := agNew(t, e, e.A.Key, map[string]any{"name": "Viewed", "instructions": "Be kind."})
	v := e.as(t, e.A.ID, member.Viewer)
	p := v.get("/console/agents")
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Body, "Viewed")
	require.Zero(t, p.Doc.Find("form[data-testid=create-agent]").Length())
	p = v.get("/console/agents/" + id)
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, "Viewed", p.Text("[data-testid=agent-name]"))
	require.Equal(t, "Be kind.", p.Text("[data-testid=agent-instructions]"))
	for _, sel := range []string{"edit-agent", "delete-agent", "playground"} {
		require.Zero(t, p.Doc.Find("[data-testid="+sel+"]").Length(), "a viewer is shown %s", sel)
	}
	require.Zero(t, p.Doc.Find("form[method=post]").Not("[action='/console/signout']").Length())

	require.Equal(t, http.StatusForbidden, v.post("/console/agents", agForm("Sneaky", nil)).Status)
	require.Equal(t, http.StatusForbidden, v.post("/console/agents/"+id, agForm("Renamed", nil)).Status)
	require.Equal(t, http.StatusForbidden, v.post("/console/agents/"+id+"/delete", nil).Status)
	require.Equal(t, http.StatusForbidden, v.post("/console/agents/"+id+"/chat", url.Values{"query": {"hi"}}).Status)
	resp := agStream(v, "/console/agents/"+id+"/chat", url.Values{"query": {"hi"}})
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	a, status := agGet(t, e, e.A.Key, id)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "Viewed", a.Name)
	r := e.api(t, "GET", "/api/v2/agent/"+id+"/conversations", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.JSONEq(t, `{"conversations":[],"nextCursor":null}`, string(r.Body), "a viewer's chat was run")
	admin := e.as(t, e.A.ID, member.Admin)
	require.NotContains(t, admin.get("/console/agents").Body, "Sneaky")
}

func testAgentsOtherOrg(t *testing.T, e *env) {
	id := agNew(t, e, e.A.Key, map[string]any{"name": "A's own", "instructions": "Secret instructions of A."})
	b := e.as(t, e.B.ID, member.Admin)
	notYours := []int{http.StatusNotFound, http.StatusForbidden}
	for _, p := range []page{
		b.get("/console/agents/" + id),
		b.post("/console/agents/"+id, agForm("Taken", nil)),
		b.post("/console/agents/"+id+"/delete", nil),
		b.post("/console/agents/"+id+"/chat", url.Values{"query": {"hi"}}),
	} {
		require.Contains(t, notYours, p.Status, p.Body)
		require.NotContains(t, p.Body, "Secret instructions")
		require.NotContains(t, p.Body, "A&#39;s own")
		require.NotContains(t, p.Body, "A's own")
	}
	resp := agStream(b, "/console/agents/"+id+"/chat", url.Values{"query": {"hi"}})
	events := testenv.ReadSSE(t, resp.Body)
	resp.Body.Close()
	require.Contains(t, notYours, resp.StatusCode)
	require.Len(t, events, 1)
	require.Equal(t, "error", agDecode(t, events[0])["type"])
	require.NotContains(t, b.get("/console/agents").Body, "own")

	a, status := agGet(t, e, e.A.Key, id)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "A's own", a.Name)
	r := e.api(t, "GET", "/api/v2/agent/"+id+"/conversations", e.A.Key, nil)
	require.JSONEq(t, `{"conversations":[],"nextCursor":null}`, string(r.Body), "another organization chatted with the agent")
	// An id nobody has.
	require.Equal(t, http.StatusNotFound, b.get("/console/agents/00000000-0000-0000-0000-000000000002").Status)
	require.Equal(t, http.StatusNotFound, b.post("/console/agents/00000000-0000-0000-0000-000000000002/chat", url.Values{"query": {"hi"}}).Status)
}

func testAgentsEscaping(t *testing.T, e *env) {
	org := e.Bootstrap("Escapes", "pro")
	c := e.as(t, org.ID, member.Admin)
	name := `<script>alert(1)</script>`
	instructions := `"><img src=x onerror=alert(1)>`
	p := c.post("/console/agents", agForm(name, url.Values{"instructions": {instructions}, "description": {instructions}}))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	loc := p.Header.Get("Location")
	// A refused form echoes what was typed: escaped too.
	refused := c.post("/console/agents", agForm(name, url.Values{"instructions": {instructions}, "temperature": {"2"}}))
	require.Equal(t, http.StatusBadRequest, refused.Status)
	turn := c.post(loc+"/chat", url.Values{"query": {`<script>alert(3)</script>`}})
	require.Equal(t, http.StatusOK, turn.Status, turn.Body)
	for _, pg := range []page{c.get("/console/agents"), c.get(loc), refused, turn} {
		require.NotContains(t, pg.Body, "<script>alert")
		require.NotContains(t, pg.Body, "<img src=x")
		require.Zero(t, pg.Doc.Find("img").Length())
		pg.Doc.Find("script").Each(func(_ int, s *goquery.Selection) {
			require.NotEmpty(t, s.AttrOr("src", ""), "an inline script")
		})
	}
	detail := c.get(loc)
	require.Equal(t, name, detail.Text("[data-testid=agent-name]"))
	require.Equal(t, instructions, detail.Text("[data-testid=agent-instructions]"))
	require.Equal(t, instructions, detail.Doc.Find("#edit-instructions").Text())
	require.Contains(t, detail.Doc.Find("[data-testid=delete-agent]").AttrOr("data-confirm", ""), name)
	require.Equal(t, name, c.get("/console/agents").Text("[data-testid=agent-link]"))
	require.Equal(t, `<script>alert(3)</script>`, turn.Text("#playground-log .user"))
}

// agStream posts a form as the playground's script does and returns the
// open response.
func agStream(c *client, path string, form url.Values) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.e.URL+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Origin", c.e.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	return resp
}

func agDecode(t *testing.T, ev sse.Event) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &m), ev.Data)
	return m
}

func testPlayground(t *testing.T, e *env) {
	org := e.Bootstrap("Playground", "pro")
	store := agDatastore(t, e, org.Key, "Shop", "## Hours\n\nOur shop opens at nine in the morning.\n\n## Deliveries\n\nDeliveries leave every Tuesday.")
	id := agNew(t, e, org.Key, map[string]any{"name": "Shop", "instructions": "Answer from the shop's notes.", "datastores": []string{store}})
	c := e.as(t, org.ID, member.Admin)
	loc := "/console/agents/" + id

	// Streamed: tokens as they come, the sources, then done; read with an
	// SSE parser, event by event.
	conv := "console-test-1"
	resp := agStream(c, loc+"/chat", url.Values{"query": {"When does the shop open?"}, "conversationId": {conv}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	var answer strings.Builder
	var sources []map[string]any
	var done map[string]any
	for ev, err := range sse.Read(resp.Body, nil) {
		require.NoError(t, err)
		m := agDecode(t, ev)
		require.Nil(t, done, "an event after done: %v", m)
		switch m["type"] {
		case "token":
			answer.WriteString(m["value"].(string))
		case "source":
			sources = append(sources, m["source"].(map[string]any))
		case "done":
			done = m
		case "error":
			t.Fatalf("error event: %v", m)
		}
	}
	resp.Body.Close()
	require.NotNil(t, done, "no done event")
	require.Contains(t, answer.String(), "nine")
	require.NotEmpty(t, sources)
	require.Equal(t, "Shop notes", sources[0]["title"])
	require.Equal(t, "Hours", sources[0]["heading"], "a source names its section, as the REST API's do")
	require.Equal(t, conv, done["conversationId"])
	require.NotEmpty(t, done["messageId"])

	// The same conversation continues; it is stored as the dashboard channel.
	resp = agStream(c, loc+"/chat", url.Values{"query": {"And deliveries?"}, "conversationId": {conv}})
	events := testenv.ReadSSE(t, resp.Body)
	resp.Body.Close()
	require.NotEmpty(t, events)
	last := agDecode(t, events[len(events)-1])
	require.Equal(t, "done", last["type"])
	require.Equal(t, conv, last["conversationId"])
	r := e.api(t, "GET", "/api/v2/agent/"+id+"/conversations", org.Key, nil)
	require.Equal(t, http.StatusOK, r.Status)
	var convs struct {
		Conversations []struct {
			ID, Channel   string
			MessagesCount int
		}
	}
	r.JSON(t, &convs)
	require.Len(t, convs.Conversations, 1)
	require.Equal(t, conv, convs.Conversations[0].ID)
	require.Equal(t, "dashboard", convs.Conversations[0].Channel)
	require.Equal(t, 4, convs.Conversations[0].MessagesCount)
	require.Equal(t, "1", c.get(loc).Text("[data-testid=stat-conversations]"))

	// Bad input while streaming: its status and one error event naming the field.
	resp = agStream(c, loc+"/chat", url.Values{"query": {"  "}, "conversationId": {conv}})
	events = testenv.ReadSSE(t, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Len(t, events, 1)
	require.Equal(t, "error", agDecode(t, events[0])["type"])
	require.Contains(t, agDecode(t, events[0])["message"], "query")
	resp = agStream(c, loc+"/chat", url.Values{"query": {"hi"}, "conversationId": {"bad id!"}})
	events = testenv.ReadSSE(t, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, agDecode(t, events[0])["message"], "conversationId")

	// Without script: the page comes back with the whole answer and its
	// sources, and the conversation to continue.
	p := c.post(loc+"/chat", url.Values{"query": {"When do deliveries leave?"}, "conversationId": {"console-nojs"}, "model": {"gemini-1-5-pro"}})
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=playground-answer]"), "Tuesday")
	require.Equal(t, "When do deliveries leave?", p.Text("#playground-log .user"))
	require.GreaterOrEqual(t, p.Doc.Find("[data-testid=playground-sources] li").Length(), 1)
	require.Contains(t, p.Text("[data-testid=playground-sources] li"), "Shop notes")
	require.Equal(t, "console-nojs", p.Doc.Find("[data-testid=playground] input[name=conversationId]").AttrOr("value", ""))
	require.Equal(t, "gemini-1-5-pro", p.Doc.Find("#playground-model option[selected]").AttrOr("value", ""))
	p = c.post(loc+"/chat", url.Values{"query": {""}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("#playground-log [data-testid=error]"), "query")
	p = c.post(loc+"/chat", url.Values{"query": {"hi"}, "model": {"gpt-5"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("#playground-log [data-testid=error]"), "selectedModel")

	// A fresh page starts a fresh conversation.
	a, b := c.get(loc), c.get(loc)
	ida := a.Doc.Find("[data-testid=playground] input[name=conversationId]").AttrOr("value", "")
	require.True(t, strings.HasPrefix(ida, "console-"), ida)
	require.NotEqual(t, ida, b.Doc.Find("[data-testid=playground] input[name=conversationId]").AttrOr("value", ""))
}

// testPlaygroundLimits: playground turns spend no API key's allowance.
func testPlaygroundLimits(t *testing.T, e *env) {
	org := e.Bootstrap("Limited", plan.Enterprise)
	require.NoError(t, account.SetLimits(context.Background(), e.App.Store, org.ID, plan.Limits{PerMinute: 3, PerDay: 3}))
	id := agNew(t, e, org.Key, map[string]any{"name": "Busy", "instructions": "Be brief."})
	c := e.as(t, org.ID, member.Admin)
	for i := range 4 {
		p := c.post("/console/agents/"+id+"/chat", url.Values{"query": {"Hello"}, "conversationId": {"console-limits"}})
		require.Equal(t, http.StatusOK, p.Status, "turn %d: %s", i, p.Text("[data-testid=error]"))
	}
	r := e.api(t, "POST", "/api/v2/agent/"+id+"/chat", org.Key, map[string]any{"query": "Hello", "conversationId": "api-1"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	// Three a minute: one went on creating the agent, one on this turn.
	require.Equal(t, "1", r.Header.Get("X-RateLimit-Remaining"), "the playground spent the key's allowance")
}

// testAgentsWarnings: a tool ticked in the form that the model is not
// offered (http_request's endpoints are set through the API only) is said
// on the agent's page.
func testAgentsWarnings(t *testing.T, e *env) {
	org := e.Bootstrap("Warned", "pro")
	c := e.as(t, org.ID, member.Admin)
	p := c.post("/console/agents", agForm("Caller", url.Values{"tools": {"http_request"}}))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Text("[data-testid=error]"))
	p = c.get(p.Header.Get("Location"))
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, p.Text("[data-testid=agent-warnings]"), "http_request is not offered to the model")
	id := agNew(t, e, org.Key, map[string]any{"name": "Quiet", "instructions": "x"})
	require.Zero(t, c.get("/console/agents/"+id).Doc.Find("[data-testid=agent-warnings]").Length())
}

// testAgentsTemperatureStep: a temperature the API set off the form's step
// would fail the browser's check of the edit form (stepMismatch), and no
// edit could be saved without changing it.
func testAgentsTemperatureStep(t *testing.T, e *env) {
	org := e.Bootstrap("Fine tuned", "pro")
	c := e.as(t, org.ID, member.Admin)
	id := agNew(t, e, org.Key, map[string]any{"name": "Precise", "instructions": "x", "temperature": 0.33})
	p := c.get("/console/agents/" + id)
	require.Equal(t, http.StatusOK, p.Status)
	in := p.Doc.Find("#edit-temperature")
	require.Equal(t, "0.33", in.AttrOr("value", ""))
	if step := in.AttrOr("step", ""); step != "any" {
		s, err := strconv.ParseFloat(step, 64)
		require.NoError(t, err)
		n := 0.33 / s
		require.InDelta(t, math.Round(n), n, 1e-9, "0.33 is not a valid value of a step of %s: the browser refuses the form", step)
	}
}
