package console_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/member"
)

// Tenant text that must come back as text.
const (
	xssScript = `<script>alert(1)</script>`
	xssImg    = `"><img src=x onerror=alert(2)>`
)

// noMarkup fails if a page rendered tenant text as markup.
func noMarkup(t *testing.T, p page) {
	t.Helper()
	require.NotContains(t, p.Body, "<script>alert")
	require.NotContains(t, p.Body, "<img src=x")
	require.Zero(t, p.Doc.Find("img").Length())
}

// source is a datasource row as the table shows it.
type source struct {
	ID, Name, Status, Error string
	Chunks                  int
}

func sourcesOf(t *testing.T, p page) map[string]source {
	t.Helper()
	out := map[string]source{}
	p.Doc.Find("[data-testid=source-row]").Each(func(_ int, s *goquery.Selection) {
		n, err := strconv.Atoi(strings.TrimSpace(s.Find("[data-testid=source-chunks]").Text()))
		require.NoError(t, err)
		src := source{
			ID: s.AttrOr("data-id", ""), Name: strings.TrimSpace(s.Find("[data-testid=source-name]").Text()),
			Status: s.AttrOr("data-status", ""), Error: strings.TrimSpace(s.Find("[data-testid=source-error]").Text()), Chunks: n,
		}
		out[src.Name] = src
	})
	return out
}

// createDatastore creates a datastore in the console and returns its id.
func createDatastore(t *testing.T, c *client, name string) string {
	t.Helper()
	p := c.post("/console/datastores", url.Values{"name": {name}, "description": {"what " + name + " knows"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	id, ok := strings.CutPrefix(p.Header.Get("Location"), "/console/datastores/")
	require.True(t, ok, p.Header.Get("Location"))
	return id
}

// settledSource polls the table fragment, as the page does, until the named
// datasource is synced or failed, and checks polling stops once all are.
func settledSource(t *testing.T, c *client, store, name string) source {
	t.Helper()
	var got source
	require.Eventually(t, func() bool {
		p := c.get("/console/datastores/" + store + "/sources")
		require.Equal(t, http.StatusOK, p.Status, p.Body)
		require.NotContains(t, p.Body, "<html", "the fragment is a whole page")
		s, ok := sourcesOf(t, p)[name]
		require.True(t, ok, "no datasource %q in %s", name, p.Body)
		got = s
		pending := false
		for _, s := range sourcesOf(t, p) {
			pending = pending || s.Status == "pending" || s.Status == "running"
		}
		polls := p.Doc.Find(`[data-testid=sources][hx-trigger="every 2s"]`).Length() == 1
		require.Equal(t, pending, polls, "the table polls exactly while something is pending: %s", p.Body)
		return s.Status == "synced" || s.Status == "error"
	}, 30*time.Second, 100*time.Millisecond, "datasource %q did not settle", name)
	return got
}

func testDatastores(t *testing.T, e *env) {
	org := e.Bootstrap("Knowledge Co", "pro")
	admin := e.as(t, org.ID, member.Admin)

	p := admin.get("/console/datastores")
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, 1, p.Doc.Find("[data-testid=create-datastore]").Length())
	require.Equal(t, 1, p.Doc.Find(`a[href="/console/datastores"].here`).Length(), "the nav marks the page")

	// Bad input: 400 naming the field, the form filled again.
	p = admin.post("/console/datastores", url.Values{"name": {"  "}, "description": {"kept"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "name")
	require.Equal(t, "kept", p.Doc.Find("#ds-description").AttrOr("value", ""))
	p = admin.post("/console/datastores", url.Values{"name": {strings.Repeat("n", 201)}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "name")
	p = admin.post("/console/datastores", url.Values{"name": {"\xff"}}) // name=%FF: not UTF-8
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "name")

	storeName := "Help " + xssScript + xssImg
	store := createDatastore(t, admin, storeName)
	p = admin.get("/console/datastores/" + store)
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, storeName, p.Text("[data-testid=datastore-name]"))
	require.Contains(t, p.Text("[data-testid=flash]"), storeName)
	noMarkup(t, p)
	for _, f := range []string{"add-text", "add-file", "add-web", "search"} {
		require.Equal(t, 1, p.Doc.Find("[data-testid="+f+"]").Length(), f)
	}
	require.Zero(t, p.Doc.Find("[data-testid=sources][hx-trigger]").Length(), "an empty table polls")

	// Text, named with markup, becomes synced.
	textName := "Bakery " + xssImg
	p = admin.post("/console/datastores/"+store+"/sources", url.Values{"type": {"text"}, "name": {textName},
		"text": {"Our bakery sells sourdough bread baked every single morning before dawn. " + xssScript}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/datastores/"+store, p.Header.Get("Location"))
	p = admin.get("/console/datastores/" + store)
	if s := sourcesOf(t, p)[textName]; s.Status == "pending" || s.Status == "running" {
		poll := p.Doc.Find("[data-testid=sources]")
		require.Equal(t, "/console/datastores/"+store+"/sources", poll.AttrOr("hx-get", ""))
		require.Equal(t, "every 2s", poll.AttrOr("hx-trigger", ""))
	}
	text := settledSource(t, admin, store, textName)
	require.Equal(t, "synced", text.Status, text.Error)
	require.Positive(t, text.Chunks)

	// A Markdown file, synced.
	p = admin.postFile("/console/datastores/"+store+"/sources", url.Values{"name": {"Opening hours"}}, "file", "hours.md",
		[]byte("# Opening hours\n\nThe shop opens at seven o'clock and closes at noon on Sundays.\n"))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	md := settledSource(t, admin, store, "Opening hours")
	require.Equal(t, "synced", md.Status, md.Error)
	// The knowledge page and the overview count the chunks held, of the
	// plan's (pro: 2,500,000).
	want := fmt.Sprintf("hold %d of the 2500000 chunks", text.Chunks+md.Chunks)
	require.Contains(t, admin.get("/console/datastores").Text("[data-testid=knowledge-quota]"), want)
	require.Equal(t, fmt.Sprintf("%d of 2500000 chunks of knowledge", text.Chunks+md.Chunks), admin.get("/console/").Text("[data-testid=knowledge-quota]"))

	// A PNG: 400 naming the file; too large a file: 413 naming it.
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89")
	p = admin.postFile("/console/datastores/"+store+"/sources", nil, "file", "photo.png", png)
	require.Equal(t, http.StatusBadRequest, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=error]"), "photo.png")
	require.Contains(t, p.Text("[data-testid=error]"), "unsupported")
	p = admin.postFile("/console/datastores/"+store+"/sources", nil, "file", "huge.txt", bytes.Repeat([]byte("a"), knowledge.MaxFileBytes+1))
	require.Equal(t, http.StatusRequestEntityTooLarge, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=error]"), "huge.txt")
	require.Contains(t, p.Text("[data-testid=error]"), "larger than")
	p = admin.postFile("/console/datastores/"+store+"/sources", nil, "other", "x.md", []byte("# x"))
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "file")

	// Bad text and web forms: 400 naming the field, the form filled again.
	p = admin.post("/console/datastores/"+store+"/sources", url.Values{"type": {"text"}, "name": {"kept name"}, "text": {"  "}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "text")
	require.Equal(t, "kept name", p.Doc.Find("#src-text-name").AttrOr("value", ""))
	p = admin.post("/console/datastores/"+store+"/sources", url.Values{"type": {"web_page"}, "url": {"file:///etc/passwd"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "url")
	require.Equal(t, "file:///etc/passwd", p.Doc.Find("#src-web-url").AttrOr("value", ""))
	p = admin.post("/console/datastores/"+store+"/sources", url.Values{"type": {"web_site"}, "url": {"https://example.com/"}, "maxPages": {"many"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "maxPages")
	p = admin.post("/console/datastores/"+store+"/sources", url.Values{"type": {"web_site"}, "url": {"https://example.com/"}, "maxPages": {"5000"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "maxPages")
	p = admin.post("/console/datastores/"+store+"/sources", url.Values{"type": {"qa"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "type")

	// A web page on a private address (loopback is not allowed here): 400
	// naming the url, the form filled again.
	p = admin.post("/console/datastores/"+store+"/sources", url.Values{"type": {"web_page"}, "url": {e.URL + "/private"}, "name": {"Intranet"}})
	require.Equal(t, http.StatusBadRequest, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=error]"), "url")
	require.Contains(t, p.Text("[data-testid=error]"), "not a public address")
	require.Equal(t, e.URL+"/private", p.Doc.Find("#src-web-url").AttrOr("value", ""))
	// A document that holds no text fails in its job, with the reason
	// shown; the table stops polling.
	p = admin.postFile("/console/datastores/"+store+"/sources", url.Values{"type": {"file"}, "name": {"Blank"}}, "file", "blank.txt", []byte("\x00\x00\n"))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	web := settledSource(t, admin, store, "Blank")
	require.Equal(t, "error", web.Status)
	require.Contains(t, web.Error, "holds no text")
	require.Zero(t, web.Chunks)

	// Search: the chunk, its score and its source.
	p = admin.get("/console/datastores/" + store + "/search?q=" + url.QueryEscape("sourdough bread"))
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	noMarkup(t, p)
	require.Equal(t, "sourdough bread", p.Doc.Find("#ds-q").AttrOr("value", ""))
	first := p.Doc.Find("[data-testid=result]").First()
	require.Contains(t, first.Find("[data-testid=result-chunk]").Text(), "sourdough bread")
	require.Contains(t, first.Find("[data-testid=result-chunk]").Text(), xssScript, "the chunk is shown as text")
	require.Equal(t, textName, strings.TrimSpace(first.Find("[data-testid=result-source]").Text()))
	sc, err := strconv.ParseFloat(strings.TrimSpace(first.Find("[data-testid=result-score]").Text()), 64)
	require.NoError(t, err)
	require.Positive(t, sc)
	p = admin.get("/console/datastores/" + store + "/search?q=" + url.QueryEscape("   "))
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "query")
	p = admin.get("/console/datastores/" + store + "/search")
	require.Equal(t, http.StatusOK, p.Status)
	require.Zero(t, p.Doc.Find("[data-testid=results]").Length())

	// The list shows the datastore with its datasource count.
	p = admin.get("/console/datastores")
	noMarkup(t, p)
	require.Equal(t, storeName, p.Text("[data-testid=datastore-link]"))
	require.Equal(t, "3", p.Text("[data-testid=datasource-count]"))

	// Resync, then delete.
	p = admin.post("/console/datasources/"+md.ID+"/resync", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, "/console/datastores/"+store, p.Header.Get("Location"))
	require.Equal(t, "synced", settledSource(t, admin, store, "Opening hours").Status)
	p = admin.get("/console/datastores/" + store)
	del := p.Doc.Find(`form[action="/console/datasources/` + md.ID + `/delete"]`)
	require.Equal(t, 1, del.Length())
	require.Contains(t, del.AttrOr("data-confirm", ""), "Opening hours")
	p = admin.post("/console/datasources/"+md.ID+"/delete", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	p = admin.get("/console/datastores/" + store)
	require.NotContains(t, sourcesOf(t, p), "Opening hours")
	require.Contains(t, sourcesOf(t, p), textName)
	require.Equal(t, http.StatusNotFound, admin.post("/console/datasources/"+md.ID+"/delete", nil).Status)
	require.Equal(t, http.StatusNotFound, admin.post("/console/datasources/not-an-id/resync", nil).Status)
	require.Equal(t, http.StatusNotFound, admin.get("/console/datastores/not-an-id").Status)
	require.Equal(t, http.StatusNotFound, admin.get("/console/datastores/00000000-0000-0000-0000-000000000000/sources").Status)

	// A viewer reads and searches, and changes nothing.
	viewer := e.as(t, org.ID, member.Viewer)
	p = viewer.get("/console/datastores")
	require.Equal(t, http.StatusOK, p.Status)
	require.Zero(t, p.Doc.Find("[data-testid=create-datastore]").Length())
	p = viewer.get("/console/datastores/" + store)
	require.Equal(t, http.StatusOK, p.Status)
	require.Contains(t, sourcesOf(t, p), textName)
	for _, f := range []string{"add-text", "add-file", "add-web", "resync", "delete"} {
		require.Zero(t, p.Doc.Find("[data-testid="+f+"]").Length(), f)
	}
	require.Equal(t, 1, p.Doc.Find("[data-testid=search]").Length())
	p = viewer.get("/console/datastores/" + store + "/search?q=sourdough")
	require.Equal(t, http.StatusOK, p.Status)
	require.NotZero(t, p.Doc.Find("[data-testid=result]").Length())
	require.Equal(t, http.StatusOK, viewer.get("/console/datastores/"+store+"/sources").Status)
	for _, refused := range []page{
		viewer.post("/console/datastores", url.Values{"name": {"viewer's"}}),
		viewer.post("/console/datastores/"+store+"/sources", url.Values{"type": {"text"}, "name": {"viewer's"}, "text": {"x"}}),
		viewer.postFile("/console/datastores/"+store+"/sources", url.Values{"name": {"viewer's"}}, "file", "v.md", []byte("# v")),
		viewer.post("/console/datasources/"+text.ID+"/resync", nil),
		viewer.post("/console/datasources/"+text.ID+"/delete", nil),
	} {
		require.Equal(t, http.StatusForbidden, refused.Status, refused.Body)
	}
	p = admin.get("/console/datastores/" + store)
	require.Len(t, sourcesOf(t, p), 2)
	require.Equal(t, "synced", sourcesOf(t, p)[textName].Status, "a viewer's resync went through")
	require.NotContains(t, admin.get("/console/datastores").Doc.Text(), "viewer's")

	// Another organization: refused, nothing shown or changed.
	other := e.as(t, e.B.ID, member.Admin)
	for _, p := range []page{
		other.get("/console/datastores/" + store),
		other.get("/console/datastores/" + store + "/sources"),
		other.get("/console/datastores/" + store + "/search?q=sourdough"),
		other.post("/console/datastores/"+store+"/sources", url.Values{"type": {"text"}, "name": {"intruder"}, "text": {"x"}}),
		other.postFile("/console/datastores/"+store+"/sources", nil, "file", "intruder.md", []byte("# x")),
		other.post("/console/datasources/"+text.ID+"/resync", nil),
		other.post("/console/datasources/"+text.ID+"/delete", nil),
	} {
		require.Contains(t, []int{http.StatusNotFound, http.StatusForbidden}, p.Status, p.Body)
		require.NotContains(t, p.Body, "Bakery")
		require.NotContains(t, p.Body, "sourdough")
		require.NotContains(t, p.Body, "Help ")
	}
	require.NotContains(t, other.get("/console/datastores").Body, "Help ")
	p = admin.get("/console/datastores/" + store)
	require.Len(t, sourcesOf(t, p), 2)
	require.Equal(t, "synced", sourcesOf(t, p)[textName].Status)
}

// testDatastorePages: the datastores list and a datastore's datasources
// come a page of 100 at a time, with links to the older and the newest;
// the agent form still offers every datastore.
func testDatastorePages(t *testing.T, e *env) {
	org := e.Bootstrap("Many Stores", "pro")
	admin := e.as(t, org.ID, member.Admin)
	ctx := context.Background()
	var first uuid.UUID
	require.NoError(t, e.App.Store.Tenant(ctx, org.ID, func(q *dbq.Queries) error {
		for i := range 101 {
			d, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{
				OrgID: org.ID, ID: uuid.New(), Name: fmt.Sprintf("store %03d", i), EmbeddingModel: "m", EmbeddingDim: 8,
			})
			if err != nil {
				return err
			}
			if i == 0 {
				first = d.ID
			}
		}
		for i := range 101 {
			if _, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{
				OrgID: org.ID, ID: uuid.New(), DatastoreID: first, Type: "text", Name: fmt.Sprintf("text %03d", i), Config: []byte("{}"),
			}); err != nil {
				return err
			}
		}
		return nil
	}))

	// Made in one transaction, the rows share a creation time: their ids
	// order them, and every one is on exactly one page.
	names := func(p page, sel string) []string {
		var out []string
		p.Doc.Find(sel).Each(func(_ int, s *goquery.Selection) { out = append(out, strings.TrimSpace(s.Text())) })
		return out
	}
	p := admin.get("/console/datastores")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	seen := names(p, "[data-testid=datastore-link]")
	require.Len(t, seen, 100)
	require.Zero(t, p.Doc.Find("[data-testid=first-page]").Length())
	next, ok := p.Doc.Find("[data-testid=next-page]").Attr("href")
	require.True(t, ok, "no link to the older datastores")
	p = admin.get(next)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	seen = append(seen, names(p, "[data-testid=datastore-link]")...)
	require.Len(t, seen, 101)
	slices.Sort(seen)
	require.Len(t, slices.Compact(seen), 101, "a datastore on both pages")
	require.Zero(t, p.Doc.Find("[data-testid=next-page]").Length())
	require.Equal(t, "/console/datastores", p.Doc.Find("[data-testid=first-page]").AttrOr("href", ""))
	p = admin.get("/console/datastores?cursor=nope")
	require.Equal(t, http.StatusBadRequest, p.Status)

	p = admin.get("/console/datastores/" + first.String())
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	seen = names(p, "[data-testid=source-name]")
	require.Len(t, seen, 100)
	next, ok = p.Doc.Find("[data-testid=sources] [data-testid=next-page]").Attr("href")
	require.True(t, ok, "no link to the older datasources")
	p = admin.get(next)
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	seen = append(seen, names(p, "[data-testid=source-name]")...)
	slices.Sort(seen)
	require.Len(t, slices.Compact(seen), 101, "a datasource on both pages, or on none")
	// The pending table polls for the page it shows.
	_, cursor, _ := strings.Cut(next, "?")
	require.Equal(t, "/console/datastores/"+first.String()+"/sources?"+cursor, p.Doc.Find("[data-testid=sources]").AttrOr("hx-get", ""))

	p = admin.get("/console/agents")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	require.Equal(t, 101, p.Doc.Find("#new-datastores option").Length(), "the agent form offers every datastore")
}

// testDatastoreLongText posts the text form with a text the API takes but
// whose percent-encoded form passes the 10 MB ParseForm reads by itself.
func testDatastoreLongText(t *testing.T, e *env) {
	org := e.Bootstrap("Long Texts", "pro")
	c := e.as(t, org.ID, member.Admin)
	store := createDatastore(t, c, "Long")
	// 1,800,000 characters (the schema takes 5,000,000): 3.6 MB of UTF-8,
	// 10.8 MB encoded. The name is too long: the page comes back naming it,
	// with the text as typed.
	text := strings.Repeat("ж", 1_800_000)
	p := c.post("/console/datastores/"+store+"/sources", url.Values{"type": {"text"}, "name": {strings.Repeat("n", 301)}, "text": {text}})
	require.Equal(t, http.StatusBadRequest, p.Status, p.Text("[data-testid=error]"))
	require.Contains(t, p.Text("[data-testid=error]"), "name")
	require.Equal(t, text, p.Doc.Find("#src-text").Text(), "the text typed was lost")
	// Past what the REST API reads too: 413 naming the text, on the page.
	p = c.post("/console/datastores/"+store+"/sources", url.Values{"type": {"text"}, "text": {strings.Repeat("ж", knowledge.MaxUploadBytes/6+1)}})
	require.Equal(t, http.StatusRequestEntityTooLarge, p.Status, p.Text("[data-testid=error]"))
	require.Contains(t, p.Text("[data-testid=error]"), "text:")
	require.Equal(t, "Long", p.Text("[data-testid=datastore-name]"))
}
