package console_test

import (
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/member"
)

// builderPost is the builder's post for a form: its settings and these
// field rows, as the page's inputs name them.
func builderPost(name string, published bool, rows ...map[string]string) url.Values {
	v := url.Values{"name": {name}, "description": {"d"}, "success_message": {"Thanks"}}
	if published {
		v.Set("published", "on")
	}
	for i, row := range rows {
		for k, x := range row {
			v.Set("field."+strconv.Itoa(i)+"."+k, x)
		}
	}
	return v
}

func fieldNames(p page) []string {
	var out []string
	p.Doc.Find("[data-testid=field-row] input[name$='.name']").Each(func(_ int, s *goquery.Selection) {
		out = append(out, s.AttrOr("value", ""))
	})
	return out
}

// An admin creates a form, builds its fields (add, edit, remove; refused
// rows come back as typed, with the reason), publishes it, reads its
// submissions in a table and downloads them as CSV with formulas
// neutralised; another organization's member finds none of it.
func testForms(t *testing.T, e *env) {
	org := e.Bootstrap("Forms Co", "pro")
	admin := e.as(t, org.ID, member.Admin)

	p := admin.get("/console/forms")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, 1, p.Doc.Find("[data-testid=no-forms]").Length())
	require.Equal(t, 1, p.Doc.Find(`a[href="/console/forms"].here`).Length(), "the nav marks the page")

	p = admin.post("/console/forms", url.Values{"name": {"  "}, "description": {"kept"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "name")
	require.Equal(t, "kept", p.Doc.Find("#form-description").AttrOr("value", ""))

	name := "Leads " + xssScript + xssImg
	p = admin.post("/console/forms", url.Values{"name": {name}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	builder := p.Header.Get("Location")
	require.True(t, strings.HasPrefix(builder, "/console/forms/"), builder)
	id := strings.TrimPrefix(builder, "/console/forms/")
	p = admin.get(builder)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	noMarkup(t, p)
	require.Equal(t, name, p.Text("[data-testid=form-name]"))
	require.Empty(t, fieldNames(p))
	require.Equal(t, 1, p.Doc.Find("[data-testid=new-field-row]").Length(), "a blank row adds a field")

	// A refused save keeps what was typed and says why.
	p = admin.post(builder, builderPost(name, false,
		map[string]string{"name": "email", "type": "email", "required": "on"},
		map[string]string{"name": "code", "type": "text", "pattern": "(unclosed"},
	))
	require.Equal(t, http.StatusBadRequest, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=error]"), "fields[1].pattern")
	require.Equal(t, []string{"email", "code"}, fieldNames(p))
	p = admin.post(builder, builderPost(name, false,
		map[string]string{"name": "a", "type": "text"},
		map[string]string{"name": "n", "type": "number", "min": "ten"},
		map[string]string{"name": "c", "type": "text"},
	))
	require.Equal(t, http.StatusBadRequest, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=error]"), "fields[1].min")
	require.Equal(t, []string{"a", "n", "c"}, fieldNames(p), "the rows after a refused one are shown too")

	// Fields added through the blank row, then one removed.
	p = admin.post(builder, builderPost(name, true,
		map[string]string{"name": "first_name", "label": "First name", "type": "text", "required": "on", "max": "50"},
		map[string]string{"name": "plan", "type": "select", "options": "free\r\npro\r\n\r\n"},
		map[string]string{"name": "gone", "type": "text"},
		map[string]string{"name": "phone", "type": "phone", "new": "1"},
	))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	p = admin.get(builder)
	require.Equal(t, []string{"first_name", "plan", "gone", "phone"}, fieldNames(p))
	require.Equal(t, "free\npro", p.Doc.Find("textarea[name='field.1.options']").Text())
	require.Equal(t, "50", p.Doc.Find("input[name='field.0.max']").AttrOr("value", ""))
	require.True(t, p.Doc.Find("[data-testid=published]").Is("[checked]"))
	p = admin.post(builder, builderPost(name, true,
		map[string]string{"name": "first_name", "label": "First name", "type": "text", "required": "on", "max": "50"},
		map[string]string{"name": "plan", "type": "select", "options": "free\npro"},
		map[string]string{"name": "gone", "type": "text", "remove": "on"},
		map[string]string{"name": "phone", "type": "phone"},
		map[string]string{"name": "", "type": "text", "new": "1"},
	))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	p = admin.get(builder)
	require.Equal(t, []string{"first_name", "plan", "phone"}, fieldNames(p))

	// The origins whose pages may use it without a key: saved, shown, and a
	// bad one refused as typed.
	withOrigins := func(origins string) url.Values {
		v := builderPost(name, true,
			map[string]string{"name": "first_name", "label": "First name", "type": "text", "required": "on", "max": "50"},
			map[string]string{"name": "plan", "type": "select", "options": "free\npro"},
			map[string]string{"name": "phone", "type": "phone"},
		)
		v.Set("allowed_origins", origins)
		return v
	}
	p = admin.post(builder, withOrigins("https://ok.example shop.example"))
	require.Equal(t, http.StatusBadRequest, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=error]"), "allowed_origins[1]")
	require.Equal(t, "https://ok.example shop.example", p.Doc.Find("#form-origins").AttrOr("value", ""))
	p = admin.post(builder, withOrigins("https://shop.example,\n https://*.shop.example"))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	r := e.api(t, "GET", "/api/forms/"+id, org.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"allowedOrigins":["https://shop.example","https://*.shop.example"]`)
	p = admin.get(builder)
	require.Equal(t, "https://shop.example https://*.shop.example", p.Doc.Find("#form-origins").AttrOr("value", ""))
	require.Equal(t, []string{"first_name", "plan", "phone"}, fieldNames(p))

	// Visitors send it; the table shows their values, escaped, newest first.
	for _, v := range []map[string]any{
		{"first_name": "=HYPERLINK(\"http://evil.example\")", "plan": "pro", "phone": "+33 6 12 34 56 78"},
		{"first_name": xssScript},
	} {
		r := e.api(t, "POST", "/api/forms/"+id, "", map[string]any{"values": v, "visitorId": "v1"})
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	p = admin.get(builder + "/submissions")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	noMarkup(t, p)
	rows := p.Doc.Find("[data-testid=submission-row]")
	require.Equal(t, 2, rows.Length())
	require.Equal(t, xssScript, strings.TrimSpace(rows.First().Find("[data-field=first_name]").Text()))
	require.Equal(t, "+33612345678", strings.TrimSpace(rows.Last().Find("[data-field=phone]").Text()))
	require.Equal(t, "First name", p.Text("[data-testid=submissions] th"), "columns are headed by labels")

	href := p.Doc.Find("[data-testid=csv]").AttrOr("href", "")
	p = admin.get(href)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, "text/csv; charset=utf-8", p.Header.Get("Content-Type"))
	records, err := csv.NewReader(strings.NewReader(p.Body)).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"first_name", "plan", "phone", "submitted_at", "id"}, records[0])
	require.Equal(t, "'=HYPERLINK(\"http://evil.example\")", records[2][0])
	require.Equal(t, "'+33612345678", records[2][2])

	p = admin.get("/console/forms")
	require.Equal(t, "yes", p.Text("[data-testid=form-published]"))
	require.Equal(t, "2", p.Text("[data-testid=form-submissions]"))

	// SECURITY: another organization's member finds nothing of it.
	other := e.as(t, e.B.ID, member.Admin)
	for _, path := range []string{builder, builder + "/submissions", builder + "/submissions.csv"} {
		p = other.get(path)
		require.Equal(t, http.StatusNotFound, p.Status, path)
		require.NotContains(t, p.Body, "HYPERLINK", path)
	}
	p = other.post(builder, builderPost("mine", false))
	require.Equal(t, http.StatusNotFound, p.Status)
	p = other.post(builder+"/delete", url.Values{})
	require.Equal(t, http.StatusNotFound, p.Status)
	require.NotContains(t, other.get("/console/forms").Body, id)

	// A form made through the API, saved unchanged in the builder, keeps
	// its fields as the API stored them (a pattern's spaces are part of it).
	apiForm := apiID(t, e, "/api/forms", org.Key, map[string]any{"name": "Codes", "fields": []map[string]any{
		{"name": "code", "type": "text", "label": " Code ", "pattern": " [a-z]+"},
		{"name": "tier", "type": "select", "options": []string{" gold ", "silver"}},
	}})
	p = admin.get("/console/forms/" + apiForm)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	input := func(name string) string { return p.Doc.Find("[name='"+name+"']").AttrOr("value", "") }
	require.Equal(t, " [a-z]+", input("field.0.pattern"))
	p = admin.post("/console/forms/"+apiForm, builderPost("Codes", false,
		map[string]string{"name": "code", "type": "text", "label": input("field.0.label"), "pattern": input("field.0.pattern")},
		map[string]string{"name": "tier", "type": "select", "options": p.Doc.Find("textarea[name='field.1.options']").Text()},
	))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	r = e.api(t, "GET", "/api/forms/"+apiForm, org.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"label":" Code "`)
	require.Contains(t, string(r.Body), `"pattern":" [a-z]+"`)
	require.Contains(t, string(r.Body), `"options":[" gold ","silver"]`)

	// One submission goes (a visitor asking for theirs to): its row's
	// button; another organization's member cannot.
	p = admin.get(builder + "/submissions")
	del := p.Doc.Find("[data-testid=delete-submission]").First().AttrOr("action", "")
	require.NotEmpty(t, del)
	require.Equal(t, http.StatusNotFound, other.post(del, url.Values{}).Status)
	p = admin.post(del, url.Values{})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	p = admin.get(builder + "/submissions")
	rows = p.Doc.Find("[data-testid=submission-row]")
	require.Equal(t, 1, rows.Length())
	require.Contains(t, rows.Find("[data-field=first_name]").Text(), "HYPERLINK", "the newest went, the other stays")
	require.Equal(t, http.StatusNotFound, admin.post(del, url.Values{}).Status, "deleted already")

	p = admin.post(builder+"/delete", url.Values{})
	require.Equal(t, http.StatusSeeOther, p.Status)
	require.Equal(t, http.StatusNotFound, admin.get(builder).Status)
	require.Equal(t, http.StatusNotFound, admin.get("/console/forms/not-an-id").Status)
}

// Viewers read forms and submissions but get no builder, and cannot post.
func testFormsViewer(t *testing.T, e *env) {
	org := e.Bootstrap("Forms Readers", "pro")
	id := apiID(t, e, "/api/forms", org.Key, map[string]any{
		"name": "Survey", "fields": []map[string]any{{"name": "score", "type": "number", "min": 1, "max": 5, "required": true}},
	})
	viewer := e.as(t, org.ID, member.Viewer)
	p := viewer.get("/console/forms")
	require.Equal(t, http.StatusOK, p.Status)
	require.Zero(t, p.Doc.Find("[data-testid=create-form]").Length())
	p = viewer.get("/console/forms/" + id)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Zero(t, p.Doc.Find("[data-testid=builder]").Length())
	require.Contains(t, p.Text("[data-testid=fields]"), "required · min 1 · max 5")
	require.Equal(t, http.StatusOK, viewer.get("/console/forms/"+id+"/submissions").Status)
	require.Equal(t, http.StatusOK, viewer.get("/console/forms/"+id+"/submissions.csv").Status)
	require.Equal(t, http.StatusForbidden, viewer.post("/console/forms/"+id, builderPost("x", true)).Status)
	require.Equal(t, http.StatusForbidden, viewer.post("/console/forms/"+id+"/delete", url.Values{}).Status)
	r := e.api(t, "POST", "/api/forms/"+id, org.Key, map[string]any{"values": map[string]any{"score": 3}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var sent struct{ ID string }
	require.NoError(t, json.Unmarshal(r.Body, &sent))
	p = viewer.get("/console/forms/" + id + "/submissions")
	require.Equal(t, 1, p.Doc.Find("[data-testid=submission-row]").Length())
	require.Zero(t, p.Doc.Find("[data-testid=delete-submission]").Length(), "viewers get no delete button")
	require.Equal(t, http.StatusForbidden, viewer.post("/console/forms/"+id+"/submissions/"+sent.ID+"/delete", url.Values{}).Status)
	require.Equal(t, http.StatusForbidden, viewer.post("/console/forms", url.Values{"name": {"x"}}).Status)
}
