package compat_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/apikey"
	"github.com/parleyhq/parley/backend/testenv"
)

type agent struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Description  string    `json:"description"`
	Instructions string    `json:"instructions"`
	Model        string    `json:"model"`
	Temperature  float64   `json:"temperature"`
	Tools        []string  `json:"tools"`
	Datastores   []string  `json:"datastores"`
	Visibility   string    `json:"visibility"`
	Status       string    `json:"status"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
	Stats        *struct {
		TotalConversations *int64   `json:"totalConversations"`
		TotalMessages      *int64   `json:"totalMessages"`
		AverageRating      *float64 `json:"averageRating"`
	} `json:"stats"`
}

type agentList struct {
	Agents []agent `json:"agents"`
	Total  int     `json:"total"`
	Page   int     `json:"page"`
	Limit  int     `json:"limit"`
}

func create(t *testing.T, e *testenv.Env, key string, body any) agent {
	t.Helper()
	r := e.Do("POST", "/api/agents", key, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a agent
	r.JSON(t, &a)
	return a
}

func TestAgentCRUDOverREST(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	for _, prefix := range []string{"/api", ""} {
		t.Run("prefix "+prefix, func(t *testing.T) {
			before := time.Now().Add(-time.Minute)
			r := e.Do("POST", prefix+"/agents", e.A.Key, map[string]any{
				"name": "Sales", "description": "Sells", "instructions": "Be brief.", "tools": []string{"request_human"},
			})
			require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
			var a agent
			r.JSON(t, &a)
			require.NotEmpty(t, a.ID)
			require.Equal(t, "/api/agents/"+a.ID, r.Header.Get("Location"))
			require.Equal(t, "gpt-4o-mini", a.Model)
			require.Equal(t, 0.7, a.Temperature)
			require.Equal(t, "active", a.Status)
			require.Equal(t, "private", a.Visibility)
			require.Equal(t, []string{}, a.Datastores)
			require.True(t, a.CreatedAt.After(before), "createdAt %v is not a fresh ISO 8601 time", a.CreatedAt)

			r = e.Do("GET", prefix+"/agents/"+a.ID, e.A.Key, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			var got agent
			r.JSON(t, &got)
			require.Equal(t, "Be brief.", got.Instructions)
			require.Equal(t, []string{"request_human"}, got.Tools)
			require.NotNil(t, got.Stats, "detail read carries stats")
			require.NotNil(t, got.Stats.TotalConversations)
			require.NotNil(t, got.Stats.AverageRating)

			r = e.Do("PUT", prefix+"/agents/"+a.ID, e.A.Key, map[string]any{"instructions": "Be very brief.", "temperature": 0.1})
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			var upd agent
			r.JSON(t, &upd)
			require.Equal(t, "Be very brief.", upd.Instructions)
			require.Equal(t, 0.1, upd.Temperature)
			require.Equal(t, "Sales", upd.Name)
			require.Equal(t, "Sells", upd.Description)
			require.False(t, upd.UpdatedAt.Before(upd.CreatedAt))

			r = e.Do("DELETE", prefix+"/agents/"+a.ID, e.A.Key, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			r = e.Do("GET", prefix+"/agents/"+a.ID, e.A.Key, nil)
			require.Equal(t, http.StatusNotFound, r.Status)
			require.Equal(t, "NOT_FOUND", r.Err(t).Error.Code)
			r = e.Do("DELETE", prefix+"/agents/"+a.ID, e.A.Key, nil)
			require.Equal(t, http.StatusNotFound, r.Status)
		})
	}
}

func TestListPaging(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	var made []string
	for i := range 5 {
		made = append(made, create(t, e, e.A.Key, map[string]any{"name": fmt.Sprint("a", i), "instructions": "x"}).ID)
	}
	var seen []string
	for page := 1; page <= 3; page++ {
		r := e.Do("GET", fmt.Sprintf("/api/agents?page=%d&limit=2", page), e.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var l agentList
		r.JSON(t, &l)
		require.Equal(t, 5, l.Total)
		require.Equal(t, page, l.Page)
		require.Equal(t, 2, l.Limit)
		for _, a := range l.Agents {
			seen = append(seen, a.ID)
		}
	}
	// Newest first, each agent exactly once across the pages.
	want := make([]string, len(made))
	for i, id := range made {
		want[len(made)-1-i] = id
	}
	require.Equal(t, want, seen)

	r := e.Do("GET", "/api/agents", e.A.Key, nil)
	var l agentList
	r.JSON(t, &l)
	require.Equal(t, 1, l.Page)
	require.Equal(t, 20, l.Limit)
}

func TestRESTRefusesBadInputNamingTheField(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	existing := create(t, e, e.A.Key, map[string]any{"name": "Keep", "instructions": "Keep me."})
	cases := []struct {
		name, method, path string
		body               any
		wantField          string
	}{
		{"name missing", "POST", "/api/agents", `{"instructions":"x"}`, "name"},
		{"instructions missing", "POST", "/api/agents", `{"name":"x"}`, "instructions"},
		{"model", "POST", "/api/agents", `{"name":"x","instructions":"y","model":"gpt-3"}`, "model"},
		{"temperature range", "POST", "/api/agents", `{"name":"x","instructions":"y","temperature":1.5}`, "temperature"},
		{"temperature type", "POST", "/api/agents", `{"name":"x","instructions":"y","temperature":"warm"}`, "temperature"},
		{"tools value", "POST", "/api/agents", `{"name":"x","instructions":"y","tools":["ssh"]}`, "tools[0]"},
		{"tools duplicate", "POST", "/api/agents", `{"name":"x","instructions":"y","tools":["web_search","web_search"]}`, "tools"},
		{"tools type", "POST", "/api/agents", `{"name":"x","instructions":"y","tools":"web_search"}`, "tools"},
		{"visibility", "POST", "/api/agents", `{"name":"x","instructions":"y","visibility":"hidden"}`, "visibility"},
		{"unknown field", "POST", "/api/agents", `{"name":"x","instructions":"y","colour":"red"}`, "colour"},
		{"org id in body", "POST", "/api/agents", `{"name":"x","instructions":"y","organizationId":"00000000-0000-0000-0000-000000000000"}`, "organizationId"},
		{"NUL in name", "POST", "/api/agents", `{"name":"a\u0000b","instructions":"y"}`, "name"},
		{"NUL in description", "POST", "/api/agents", `{"name":"a","description":"\u0000","instructions":"y"}`, "description"},
		{"NUL in instructions", "POST", "/api/agents", `{"name":"a","instructions":"\u0000"}`, "instructions"},
		{"blank instructions", "POST", "/api/agents", `{"name":"a","instructions":" \n\t"}`, "instructions"},
		{"malformed JSON", "POST", "/api/agents", `{"name":"x",`, "body"},
		{"not an object", "POST", "/api/agents", `["name"]`, "body"},
		{"two objects", "POST", "/api/agents", `{"name":"x","instructions":"y"}{}`, "body"},
		{"empty body", "POST", "/api/agents", ``, "body"},
		{"datastores type", "POST", "/api/agents", `{"name":"x","instructions":"y","datastores":"d1"}`, "datastores"},
		{"update nothing", "PUT", "/api/agents/" + existing.ID, `{}`, "body"},
		{"update blank name", "PUT", "/api/agents/" + existing.ID, `{"name":""}`, "name"},
		{"update temperature", "PUT", "/api/agents/" + existing.ID, `{"temperature":-1}`, "temperature"},
		{"update unknown field", "PUT", "/api/agents/" + existing.ID, `{"owner":"me"}`, "owner"},
		{"page", "GET", "/api/agents?page=abc", nil, "page"},
		{"page zero", "GET", "/api/agents?page=0", nil, "page"},
		{"limit over max", "GET", "/api/agents?limit=101", nil, "limit"},
		{"limit zero", "GET", "/api/agents?limit=0", nil, "limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.Do(tc.method, tc.path, e.A.Key, tc.body)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
			eb := r.Err(t)
			require.Equal(t, "BAD_REQUEST", eb.Error.Code)
			require.Equal(t, tc.wantField, eb.Error.Field)
			require.True(t, strings.HasPrefix(eb.Error.Message, tc.wantField), "message %q does not name %q", eb.Error.Message, tc.wantField)
		})
	}
	// Nothing of the refused updates landed.
	r := e.Do("GET", "/api/agents/"+existing.ID, e.A.Key, nil)
	var got agent
	r.JSON(t, &got)
	require.Equal(t, "Keep", got.Name)
	require.Equal(t, 0.7, got.Temperature)
	r = e.Do("GET", "/api/agents", e.A.Key, nil)
	var l agentList
	r.JSON(t, &l)
	require.Equal(t, 1, l.Total, "a refused create stored an agent")
}

func TestCrossTenant(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	a := create(t, e, e.A.Key, map[string]any{"name": "A's agent", "instructions": "secret sauce"})

	t.Run("B cannot read, update or delete A's agent", func(t *testing.T) {
		for _, req := range []struct {
			method string
			body   any
		}{{"GET", nil}, {"PUT", map[string]any{"instructions": "pwned"}}, {"DELETE", nil}} {
			r := e.Do(req.method, "/api/agents/"+a.ID, e.B.Key, req.body)
			require.Equal(t, http.StatusForbidden, r.Status, "%s %s", req.method, r.Body)
			require.Equal(t, "FORBIDDEN", r.Err(t).Error.Code)
			require.NotContains(t, string(r.Body), "secret sauce")
			require.NotContains(t, string(r.Body), "A's agent")
		}
		r := e.Do("GET", "/api/agents/"+a.ID, e.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status)
		var got agent
		r.JSON(t, &got)
		require.Equal(t, "secret sauce", got.Instructions)
	})

	t.Run("B's list holds none of A's agents", func(t *testing.T) {
		create(t, e, e.B.Key, map[string]any{"name": "B's agent", "instructions": "x"})
		r := e.Do("GET", "/api/agents?limit=100", e.B.Key, nil)
		var l agentList
		r.JSON(t, &l)
		require.Equal(t, 1, l.Total)
		require.Len(t, l.Agents, 1)
		require.Equal(t, "B's agent", l.Agents[0].Name)
	})

	t.Run("unknown ids are 404, not 403", func(t *testing.T) {
		for _, id := range []string{"01a200f2-0000-7000-8000-000000000000", "not-a-uuid"} {
			r := e.Do("GET", "/api/agents/"+id, e.B.Key, nil)
			require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
		}
	})

	t.Run("ids and timestamps in a body change nothing", func(t *testing.T) {
		r := e.Do("PUT", "/api/agents/"+a.ID, e.A.Key, map[string]any{
			"id": "01a200f2-0000-7000-8000-000000000000", "createdAt": "2001-01-01T00:00:00Z",
			"updatedAt": "2001-01-01T00:00:00Z", "status": "deleted", "description": "round trip",
			"stats": map[string]any{"totalMessages": 99},
		})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var got agent
		r.JSON(t, &got)
		require.Equal(t, a.ID, got.ID)
		require.Equal(t, a.CreatedAt, got.CreatedAt)
		require.Equal(t, "active", got.Status)
		require.Equal(t, "round trip", got.Description)
		created := create(t, e, e.A.Key, map[string]any{"name": "n", "instructions": "i", "id": a.ID, "createdAt": "2001-01-01T00:00:00Z"})
		require.NotEqual(t, a.ID, created.ID)
		require.True(t, created.CreatedAt.Year() > 2001)
	})
}

func TestAuthenticationAndScopes(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	unknown, err := apikey.Generate()
	require.NoError(t, err)
	for _, tc := range []struct{ name, header string }{
		{"missing", ""},
		{"not bearer", "Basic " + e.A.Key},
		{"malformed", "Bearer nope"},
		{"mistyped", "Bearer " + e.A.Key[:len(e.A.Key)-1] + flip(e.A.Key[len(e.A.Key)-1])},
		{"unknown but well-formed", "Bearer " + unknown.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.URL+"/api/agents", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			require.Equal(t, "Bearer", resp.Header.Get("WWW-Authenticate"), "a 401 names the scheme that gets in")
		})
	}
}

func flip(c byte) string {
	if c == 'a' {
		return "b"
	}
	return "a"
}

// The schema's unique rule compares datastore ids as strings; one datastore
// spelt twice (lower and upper case, braces, urn:uuid:) is attached once,
// not a primary-key violation (500).
func TestAgentDatastoreSpeltTwiceIsAttachedOnce(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := e.Do("POST", "/api/datastores", e.A.Key, map[string]any{"name": "Docs"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct {
		ID string `json:"id"`
	}
	r.JSON(t, &ds)
	same := []string{ds.ID, strings.ToUpper(ds.ID), "{" + ds.ID + "}", "urn:uuid:" + ds.ID}

	a := create(t, e, e.A.Key, map[string]any{"name": "a", "instructions": "b", "datastores": same})
	require.Equal(t, []string{ds.ID}, a.Datastores)
	first := a

	a = create(t, e, e.A.Key, map[string]any{"name": "c", "instructions": "d"})
	r = e.Do("PUT", "/api/agents/"+a.ID, e.A.Key, map[string]any{"datastores": same[:2]})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var upd agent
	r.JSON(t, &upd)
	require.Equal(t, []string{ds.ID}, upd.Datastores)

	// A list shows each agent's datastores too (it showed none).
	none := create(t, e, e.A.Key, map[string]any{"name": "e", "instructions": "f"})
	r = e.Do("GET", "/api/agents", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var list struct{ Agents []agent }
	r.JSON(t, &list)
	got := map[string][]string{}
	for _, x := range list.Agents {
		got[x.ID] = x.Datastores
	}
	require.Equal(t, map[string][]string{first.ID: {ds.ID}, upd.ID: {ds.ID}, none.ID: {}}, got)
}

// The schema's not-blank rule (string.not_blank) read \S as RE2 does,
// ASCII only: a name or instructions of a vertical tab, a no-break space or
// an em space passed it, on create as on update, and an agent or a
// datastore was named nothing; a chat question of them was sent to the
// model. It now reads white space as Unicode does (strings.TrimSpace). Each
// is 400 naming the field, and an update changes nothing.
func TestUnicodeBlankNamesAreRefused(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	a := create(t, e, e.A.Key, map[string]any{"name": "Sales", "instructions": "Be brief."})
	r := e.Do("POST", "/api/datastores", e.A.Key, map[string]any{"name": "Docs"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct{ ID, Name string }
	r.JSON(t, &ds)
	for _, blank := range []string{"\u000b", "\u00a0", "\u2003", " \u3000 "} {
		for _, tc := range []struct {
			method, path string
			body         map[string]any
			field        string
		}{
			{"POST", "/api/agents", map[string]any{"name": blank, "instructions": "i"}, "name"},
			{"POST", "/api/agents", map[string]any{"name": "n", "instructions": blank}, "instructions"},
			{"PUT", "/api/agents/" + a.ID, map[string]any{"name": blank}, "name"},
			{"PUT", "/api/agents/" + a.ID, map[string]any{"instructions": blank}, "instructions"},
			{"POST", "/api/datastores", map[string]any{"name": blank}, "name"},
			{"PATCH", "/api/datastores/" + ds.ID, map[string]any{"name": blank}, "name"},
			{"POST", "/api/v2/agent/" + a.ID + "/chat", map[string]any{"query": blank, "conversationId": "blank"}, "query"},
		} {
			r := e.Do(tc.method, tc.path, e.A.Key, tc.body)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s %s %q: %s", tc.method, tc.path, blank, r.Body)
			require.Equal(t, tc.field, r.Err(t).Error.Field, "%s %s %q", tc.method, tc.path, blank)
		}
	}
	r = e.Do("GET", "/api/agents/"+a.ID, e.A.Key, nil)
	var got agent
	r.JSON(t, &got)
	require.Equal(t, "Sales", got.Name)
	require.Equal(t, "Be brief.", got.Instructions)
	r = e.Do("GET", "/api/datastores/"+ds.ID, e.A.Key, nil)
	r.JSON(t, &ds)
	require.Equal(t, "Docs", ds.Name)
}
