package compat_test

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/compat"
	"github.com/parleyhq/parley/compat/wire"
)

type formField struct {
	Name     string   `json:"name"`
	Label    string   `json:"label"`
	Type     string   `json:"type"`
	Required bool     `json:"required"`
	Options  []string `json:"options"`
	Min      *float64 `json:"min"`
	Max      *float64 `json:"max"`
	Pattern  string   `json:"pattern"`
}

type formReply struct {
	ID              string      `json:"id"`
	Name            string      `json:"name"`
	Description     string      `json:"description"`
	Fields          []formField `json:"fields"`
	Published       *bool       `json:"published"`
	SuccessMessage  string      `json:"successMessage"`
	SubmissionCount *int        `json:"submissionCount"`
	CreatedAt       *string     `json:"createdAt"`
}

const signupForm = `{
  "name": "Sign up", "description": "For the beta", "successMessage": "See you soon",
  "fields": [
    {"name": "first_name", "label": "First name", "type": "text", "required": true, "max": 50},
    {"name": "email", "label": "Email", "type": "email", "required": true},
    {"name": "phone", "type": "phone"},
    {"name": "seats", "type": "number", "min": 1, "max": 500},
    {"name": "site", "type": "url"},
    {"name": "start", "type": "date"},
    {"name": "plan", "type": "select", "options": ["free", "pro"]},
    {"name": "channels", "type": "multiselect", "options": ["email", "sms", "chat"]},
    {"name": "notes", "type": "textarea", "pattern": "[^<>]*"},
    {"name": "terms", "type": "checkbox", "required": true}
  ]
}`

func makeForm(t *testing.T, e *testenv.Env, key, body string) formReply {
	t.Helper()
	r := e.Do("POST", "/api/forms", key, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var f formReply
	r.JSON(t, &f)
	return f
}

func publish(t *testing.T, e *testenv.Env, key, id string) {
	t.Helper()
	r := e.Do("PUT", "/api/forms/"+id, key, `{"published":true}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}

func TestFormCRUDOverREST(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	for _, prefix := range []string{"/api", ""} {
		t.Run("prefix "+prefix, func(t *testing.T) {
			r := e.Do("POST", prefix+"/forms", e.A.Key, signupForm)
			require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
			var f formReply
			r.JSON(t, &f)
			require.Equal(t, "/api/forms/"+f.ID, r.Header.Get("Location"))
			require.Len(t, f.Fields, 10)
			require.Equal(t, "first_name", f.Fields[0].Name)
			require.Equal(t, 50.0, *f.Fields[0].Max)
			require.Equal(t, []string{"free", "pro"}, f.Fields[6].Options)
			require.False(t, *f.Published)
			require.Zero(t, *f.SubmissionCount)

			r = e.Do("GET", prefix+"/forms/"+f.ID, e.A.Key, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

			r = e.Do("GET", prefix+"/forms", e.A.Key, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			var l struct {
				Forms      []formReply `json:"forms"`
				NextCursor string      `json:"nextCursor"`
			}
			r.JSON(t, &l)
			require.NotEmpty(t, l.Forms)
			require.Equal(t, l.Forms[0].ID, f.ID, "newest first")

			r = e.Do("PUT", prefix+"/forms/"+f.ID, e.A.Key, `{"name":"Sign up now","fields":[{"name":"email","type":"email","required":true}]}`)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			var upd formReply
			r.JSON(t, &upd)
			require.Equal(t, "Sign up now", upd.Name)
			require.Equal(t, "For the beta", upd.Description, "keys not sent are kept")
			require.Len(t, upd.Fields, 1)

			r = e.Do("PUT", prefix+"/forms/"+f.ID, e.A.Key, `{}`)
			require.Equal(t, http.StatusBadRequest, r.Status)
			r = e.Do("PUT", prefix+"/forms/"+f.ID, e.A.Key, `{"owner":"me"}`)
			require.Equal(t, http.StatusBadRequest, r.Status)
			require.Equal(t, "owner", r.Err(t).Error.Field)

			r = e.Do("DELETE", prefix+"/forms/"+f.ID, e.A.Key, nil)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			r = e.Do("GET", prefix+"/forms/"+f.ID, e.A.Key, nil)
			require.Equal(t, http.StatusNotFound, r.Status)
			require.Equal(t, "NOT_FOUND", r.Err(t).Error.Code)
		})
	}
}

func TestFormDefinitionErrorsNameTheField(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	for body, field := range map[string]string{
		`{"name":"","fields":[]}`: "name",
		`{"name":"x","successMessage":"` + strings.Repeat("a", 1001) + `"}`:                       "successMessage",
		`{"name":"x","fields":[{"name":"a","type":"colour"}]}`:                                    "fields[0].type",
		`{"name":"x","fields":[{"name":"a","type":"text"},{"name":"a","type":"text"}]}`:           "fields",
		`{"name":"x","fields":[{"name":"a","type":"text","pattern":"(a"}]}`:                       "fields[0].pattern",
		`{"name":"x","fields":[{"name":"a","type":"select"}]}`:                                    "fields[0]",
		`{"name":"x","fields":[{"name":"a","type":"text","color":"red"}]}`:                        "color",
		`{"name":"x","fields":[{"name":"a","type":"number","min":"1"}]}`:                          "fields[0].min",
		`{"name":"x","fields":[{"name":"a","type":"text","max":2000}]}`:                           "fields[0].max",
		`{"name":"x","fields":[{"name":"a","type":"multiselect","options":["a"],"pattern":"a"}]}`: "fields[0]",
		`{"name":"x","published":"yes"}`:                                                          "published",
	} {
		r := e.Do("POST", "/api/forms", e.A.Key, body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", body, r.Body)
		b := r.Err(t)
		require.Equal(t, "BAD_REQUEST", b.Error.Code)
		require.Equal(t, field, b.Error.Field, "%s: %s", body, r.Body)
	}
}

func TestPublicFormOverREST(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	f := makeForm(t, e, e.A.Key, signupForm)

	r := e.Do("GET", "/api/forms/"+f.ID, "", nil)
	require.Equal(t, http.StatusNotFound, r.Status, "unpublished: not found without a key")
	r = e.Do("POST", "/api/forms/"+f.ID, "", `{"values":{},"visitorId":"v"}`)
	require.Equal(t, http.StatusNotFound, r.Status)
	r = e.Do("GET", "/api/forms/"+f.ID, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "the owner's key reads any of its forms")

	publish(t, e, e.A.Key, f.ID)
	r = e.Do("GET", "/forms/"+f.ID, "", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.NotEmpty(t, r.Header.Get("X-RateLimit-Limit"), "counted on the owner's plan")
	var pub map[string]any
	r.JSON(t, &pub)
	require.ElementsMatch(t, []string{"id", "name", "description", "fields", "successMessage"}, keys(pub),
		"without a key: the fields, not the form's records")

	good := map[string]any{
		"first_name": "Ada", "email": "ada@example.com", "phone": "+33 6 12 34 56 78", "seats": 3,
		"site": "https://example.com", "start": "2025-04-01", "plan": "pro", "channels": []string{"sms", "email"},
		"notes": "Hello\nthere", "terms": true,
	}
	r = e.Do("POST", "/api/forms/"+f.ID, "", map[string]any{"values": good, "visitorId": "v1", "conversationId": "c1"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var sub struct {
		ID             string `json:"id"`
		SuccessMessage string `json:"successMessage"`
	}
	r.JSON(t, &sub)
	require.NotEmpty(t, sub.ID)
	require.Equal(t, "See you soon", sub.SuccessMessage)

	with := func(k string, v any) map[string]any {
		out := map[string]any{}
		for kk, vv := range good {
			out[kk] = vv
		}
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v
		}
		return out
	}
	for _, c := range []struct {
		values map[string]any
		field  string
	}{
		{with("first_name", nil), "values.first_name"},
		{with("first_name", strings.Repeat("a", 51)), "values.first_name"},
		{with("email", "ada@"), "values.email"},
		{with("phone", "0612345678"), "values.phone"},
		{with("seats", 0), "values.seats"},
		{with("seats", "many"), "values.seats"},
		{with("site", "javascript:alert(1)"), "values.site"},
		{with("start", "2025-02-30"), "values.start"},
		{with("plan", "gold"), "values.plan"},
		{with("channels", []string{"fax"}), "values.channels"},
		{with("notes", "<script>"), "values.notes"},
		{with("terms", false), "values.terms"},
		{with("isAdmin", true), "values.isAdmin"},
	} {
		r := e.Do("POST", "/api/forms/"+f.ID, "", map[string]any{"values": c.values, "visitorId": "v1"})
		require.Equal(t, http.StatusBadRequest, r.Status, "%v: %s", c.values, r.Body)
		b := r.Err(t)
		require.Equal(t, "BAD_REQUEST", b.Error.Code)
		require.Equal(t, c.field, b.Error.Field, "%s", r.Body)
		require.True(t, strings.HasPrefix(b.Error.Message, c.field+":"), "%s", b.Error.Message)
	}
	for body, field := range map[string]string{
		`{"values":{"first_name":"Ada"}}`:                                                   "visitorId",
		`{"values":[1],"visitorId":"v"}`:                                                    "values",
		`{"values":{"first_name":"Ada","seats":1e400},"visitorId":"v"}`:                     "values.seats",
		`{"values":{},"visitorId":"v","extra":1}`:                                           "extra",
		`{"values":{},"visitorId":"v w"}`:                                                   "visitorId",
		`{"values":{},"visitorId":"v","conversationId":"` + strings.Repeat("c", 201) + `"}`: "conversationId",
		`not json`: "body",
	} {
		r := e.Do("POST", "/api/forms/"+f.ID, "", body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", body, r.Body)
		require.Equal(t, field, r.Err(t).Error.Field, "%s: %s", body, r.Body)
	}

	r = e.Do("GET", "/api/forms/"+f.ID+"/submissions", "", nil)
	require.Equal(t, http.StatusUnauthorized, r.Status, "submissions need a key")
	r = e.Do("GET", "/api/forms/"+f.ID+"/submissions", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var subs struct {
		Submissions []struct {
			ID             string         `json:"id"`
			Values         map[string]any `json:"values"`
			VisitorID      string         `json:"visitorId"`
			ConversationID string         `json:"conversationId"`
		} `json:"submissions"`
	}
	r.JSON(t, &subs)
	require.Len(t, subs.Submissions, 1, "refused submissions store nothing")
	s := subs.Submissions[0]
	require.Equal(t, sub.ID, s.ID)
	require.Equal(t, "+33612345678", s.Values["phone"])
	require.Equal(t, 3.0, s.Values["seats"])
	require.Equal(t, []any{"sms", "email"}, s.Values["channels"])
	require.Equal(t, "v1", s.VisitorID)
	require.Equal(t, "c1", s.ConversationID)
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The export: a header of the field names, submitted_at and id, one row per
// submission newest first, and formula cells neutralised.
func TestSubmissionsCSVExport(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	f := makeForm(t, e, e.A.Key, `{"name":"Leads","fields":[
		{"name":"name","type":"text"},{"name":"phone","type":"phone"},{"name":"n","type":"number"},
		{"name":"tags","type":"multiselect","options":["-x","y"]},{"name":"note","type":"textarea"}]}`)
	for _, v := range []string{
		`{"name":"=HYPERLINK(\"http://evil.example\",\"Click\")","phone":"+1 415 555 0100","n":-3}`,
		`{"name":"@SUM(1+1)*cmd|' /C calc'!A0","tags":["-x","y"],"note":"first, \"quoted\"\nsecond"}`,
		`{"name":"-2+3+cmd|' /C calc'!A0","note":"\t=1+1"}`,
		`{"name":"Plain Ada"}`,
	} {
		r := e.Do("POST", "/api/forms/"+f.ID, e.A.Key, `{"values":`+v+`}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	r := e.Do("GET", "/api/forms/"+f.ID+"/submissions?format=csv", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, "text/csv; charset=utf-8", r.Header.Get("Content-Type"))
	require.Contains(t, r.Header.Get("Content-Disposition"), "attachment")
	rows, err := csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 5)
	require.Equal(t, []string{"name", "phone", "n", "tags", "note", "submitted_at", "id"}, rows[0])
	require.Equal(t, []string{"Plain Ada", "", "", "", ""}, rows[1][:5], "newest first")
	// (Values are trimmed: the tab goes, the formula stays neutralised.)
	require.Equal(t, []string{"'-2+3+cmd|' /C calc'!A0", "", "", "", "'=1+1"}, rows[2][:5])
	require.Equal(t, []string{"'@SUM(1+1)*cmd|' /C calc'!A0", "", "", "'-x; y", "first, \"quoted\"\nsecond"}, rows[3][:5])
	require.Equal(t, []string{"'=HYPERLINK(\"http://evil.example\",\"Click\")", "'+14155550100", "-3", "", ""}, rows[4][:5])
	for _, row := range rows[1:] {
		require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, row[5])
		require.Len(t, row[6], 36)
	}

	r = e.Do("GET", "/api/forms/"+f.ID+"/submissions?format=xml", e.A.Key, nil)
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "format", r.Err(t).Error.Field)
	r = e.Do("GET", "/api/forms/"+f.ID+"/submissions?format=csv", e.B.Key, nil)
	require.Equal(t, http.StatusForbidden, r.Status, "another organization's export")
	require.Equal(t, "FORBIDDEN", r.Err(t).Error.Code)
}

func TestSubmissionsPageByCursorOverREST(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	f := makeForm(t, e, e.A.Key, `{"name":"N","fields":[{"name":"n","type":"number"}]}`)
	for i := range 5 {
		r := e.Do("POST", "/api/forms/"+f.ID, e.A.Key, fmt.Sprintf(`{"values":{"n":%d}}`, i))
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	var got []float64
	cursor := ""
	for range 10 {
		r := e.Do("GET", "/api/forms/"+f.ID+"/submissions?limit=2&cursor="+cursor, e.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var page struct {
			Submissions []struct {
				Values map[string]float64 `json:"values"`
			} `json:"submissions"`
			NextCursor string `json:"nextCursor"`
		}
		r.JSON(t, &page)
		require.LessOrEqual(t, len(page.Submissions), 2)
		for _, s := range page.Submissions {
			got = append(got, s.Values["n"])
		}
		if cursor = page.NextCursor; cursor == "" {
			require.Contains(t, string(r.Body), `"nextCursor":null`, "null on the last page")
			break
		}
	}
	require.Equal(t, []float64{4, 3, 2, 1, 0}, got)
	r := e.Do("GET", "/api/forms/"+f.ID+"/submissions?limit=abc", e.A.Key, nil)
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "limit", r.Err(t).Error.Field)
	r = e.Do("GET", "/api/forms/"+f.ID+"/submissions?limit=1000", e.A.Key, nil)
	require.Equal(t, http.StatusBadRequest, r.Status)
}

// Every form route refuses another organization's key with 403 (SPEC §5.6)
// and changes nothing; ids that do not exist are 404.
func TestFormRoutesTenantIsolation(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	f := makeForm(t, e, e.A.Key, signupForm)
	r := e.Do("POST", "/api/forms/"+f.ID, e.A.Key, `{"values":{"first_name":"Ada","email":"a@b.co","terms":true}}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/forms/" + f.ID, ""},
		{"PUT", "/api/forms/" + f.ID, `{"name":"mine"}`},
		{"DELETE", "/api/forms/" + f.ID, ""},
		{"POST", "/api/forms/" + f.ID, `{"values":{"first_name":"Eve","email":"e@b.co","terms":true}}`},
		{"GET", "/api/forms/" + f.ID + "/submissions", ""},
		{"GET", "/api/forms/" + f.ID + "/submissions?format=csv", ""},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := e.Do(c.method, c.path, e.B.Key, body)
		require.Equal(t, http.StatusForbidden, r.Status, "%s %s: %s", c.method, c.path, r.Body)
		require.Equal(t, "FORBIDDEN", r.Err(t).Error.Code)
		require.NotContains(t, string(r.Body), "Sign up")
	}
	r = e.Do("GET", "/api/forms", e.B.Key, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.NotContains(t, string(r.Body), f.ID)
	r = e.Do("GET", "/api/forms/"+f.ID, e.A.Key, nil)
	var still formReply
	r.JSON(t, &still)
	require.Equal(t, "Sign up", still.Name)
	require.Equal(t, 1, *still.SubmissionCount)

	for _, id := range []string{"00000000-0000-7000-8000-000000000000", "nope"} {
		r = e.Do("GET", "/api/forms/"+id, e.B.Key, nil)
		require.Equal(t, http.StatusNotFound, r.Status)
		r = e.Do("GET", "/api/forms/"+id, "", nil)
		require.Equal(t, http.StatusNotFound, r.Status)
	}
}

// Public submissions count on the owner's plan (free: 10 a minute) per
// visitor and per client IP, each per form, as public agents' turns do.
func TestPublicFormLimitsPerVisitorAndIP(t *testing.T) {
	t.Parallel()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	e := testenv.New(t, func(cfg *server.Config) { cfg.TrustedProxies = loopback })
	free := e.Bootstrap("Free", "free")
	body := `{"name":"Ping","published":true,"fields":[{"name":"n","type":"number"}]}`
	one, two := makeForm(t, e, free.Key, body), makeForm(t, e, free.Key, body)
	submit := func(form, visitor, ip string) *http.Response {
		resp := e.Post("/api/forms/"+form, map[string]string{"X-Forwarded-For": ip},
			fmt.Sprintf(`{"values":{"n":1},"visitorId":%q}`, visitor))
		resp.Body.Close()
		return resp
	}

	// One visitor from 11 addresses: the visitor's 11th is refused.
	for i := range 10 {
		resp := submit(one.ID, "roamer", fmt.Sprintf("198.51.100.%d", i))
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Equal(t, "10", resp.Header.Get("X-RateLimit-Limit"))
	}
	resp := submit(one.ID, "roamer", "198.51.100.99")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))

	// Eleven visitors from one address: the address's 11th is refused.
	for i := range 10 {
		require.Equal(t, http.StatusCreated, submit(one.ID, fmt.Sprint("v", i), "203.0.113.7").StatusCode)
	}
	require.Equal(t, http.StatusTooManyRequests, submit(one.ID, "v-new", "203.0.113.7").StatusCode)

	// Reading the form counts on the address too.
	r := e.Do("GET", "/api/forms/"+one.ID, "", nil)
	require.Equal(t, http.StatusOK, r.Status, "another address (the loopback) is not limited yet")
	req, err := http.NewRequest("GET", e.URL+"/api/forms/"+one.ID, nil)
	require.NoError(t, err)
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	got, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	got.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, got.StatusCode)

	// Another form has its own counts; the owner's key is not counted as a
	// visitor.
	require.Equal(t, http.StatusCreated, submit(two.ID, "roamer", "203.0.113.7").StatusCode)
	r = e.Do("POST", "/api/forms/"+one.ID, free.Key, `{"values":{"n":2}}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
}

// A body larger than 1 MiB is 413 naming the body; a form submission
// whose values the form allows is taken whole (ten textareas of 10,000
// characters).
func TestLargeBodies(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := e.Do("POST", "/api/agents", e.A.Key, `{"name":"x","instructions":"`+strings.Repeat("y", compat.MaxBodyBytes)+`"}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "%s", r.Body)
	require.Equal(t, "PAYLOAD_TOO_LARGE", r.Err(t).Error.Code)
	require.Equal(t, "body", r.Err(t).Error.Field)

	fields := make([]string, 10)
	for i := range fields {
		fields[i] = fmt.Sprintf(`{"name":"t%d","type":"textarea"}`, i)
	}
	f := makeForm(t, e, e.A.Key, `{"name":"Long","fields":[`+strings.Join(fields, ",")+`]}`)
	publish(t, e, e.A.Key, f.ID)
	values := map[string]any{}
	for i := range fields {
		values[fmt.Sprintf("t%d", i)] = strings.Repeat("é", 10000)
	}
	r = e.Do("POST", "/api/forms/"+f.ID, "", map[string]any{"values": values, "visitorId": "v1"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

	r = e.Do("POST", "/api/forms/"+f.ID, "", `{"visitorId":"v1","values":{"t0":"`+strings.Repeat("y", wire.MaxMessageBytes)+`"}}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "%s", r.Body)
	require.Equal(t, "body", r.Err(t).Error.Field)
}

// One submission can be deleted (a visitor asking for what they sent to
// go) and only that one: the form and its other submissions stay. Another
// organization's key is 403 and deletes nothing; a submission the form
// does not hold is 404.
func TestDeleteSubmissionOverREST(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	f := makeForm(t, e, e.A.Key, `{"name":"N","fields":[{"name":"n","type":"number"}]}`)
	other := makeForm(t, e, e.A.Key, `{"name":"O","fields":[{"name":"n","type":"number"}]}`)
	var ids []string
	for i := range 2 {
		r := e.Do("POST", "/api/forms/"+f.ID, e.A.Key, fmt.Sprintf(`{"values":{"n":%d}}`, i))
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var sent struct{ ID string }
		r.JSON(t, &sent)
		ids = append(ids, sent.ID)
	}
	listed := func() []string {
		r := e.Do("GET", "/api/forms/"+f.ID+"/submissions", e.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var page struct{ Submissions []struct{ ID string } }
		r.JSON(t, &page)
		var out []string
		for _, s := range page.Submissions {
			out = append(out, s.ID)
		}
		return out
	}

	r := e.Do("DELETE", "/api/forms/"+f.ID+"/submissions/"+ids[0], e.B.Key, nil)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	for _, path := range []string{
		"/api/forms/" + other.ID + "/submissions/" + ids[0], // another form's
		"/api/forms/" + f.ID + "/submissions/00000000-0000-7000-8000-000000000000",
		"/api/forms/" + f.ID + "/submissions/nope",
	} {
		r = e.Do("DELETE", path, e.A.Key, nil)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", path, r.Body)
	}
	require.ElementsMatch(t, ids, listed(), "nothing deleted yet")

	r = e.Do("DELETE", "/api/forms/"+f.ID+"/submissions/"+ids[0], e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.JSONEq(t, `{"id":"`+ids[0]+`","deleted":true}`, string(r.Body))
	require.Equal(t, []string{ids[1]}, listed())
	r = e.Do("DELETE", "/api/forms/"+f.ID+"/submissions/"+ids[0], e.A.Key, nil)
	require.Equal(t, http.StatusNotFound, r.Status, "deleted already")
}
