package knowledge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

type kfix struct {
	*testenv.Env
}

func (f kfix) datastore(t *testing.T, key, name string) string {
	t.Helper()
	r := f.Do("POST", "/api/datastores", key, map[string]any{"name": name})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var d struct{ ID string }
	r.JSON(t, &d)
	require.Equal(t, "/api/datastores/"+d.ID, r.Header.Get("Location"))
	return d.ID
}

type datasource struct {
	ID, Status, Error, Type, Name string
	ChunkCount                    int
}

func (f kfix) source(t *testing.T, key, store string, body any) datasource {
	t.Helper()
	r := f.Do("POST", "/api/datastores/"+store+"/datasources", key, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var d datasource
	r.JSON(t, &d)
	require.Equal(t, "/api/datasources/"+d.ID, r.Header.Get("Location"))
	return d
}

// texts adds a text datasource per entry (named by its key) and waits for
// each to sync.
func (f kfix) texts(t *testing.T, key, store string, docs map[string]string) {
	t.Helper()
	for name, text := range docs {
		ds := f.source(t, key, store, map[string]any{"type": "text", "name": name, "text": text})
		require.Equal(t, "synced", f.settled(t, key, ds.ID).Status)
	}
}

// agent creates an agent answering from the datastore and returns its id.
func (f kfix) agent(t *testing.T, key, store string) string {
	t.Helper()
	r := f.Do("POST", "/api/agents", key, map[string]any{"name": "Shop", "instructions": "Answer from the shop's documents.", "model": "gpt-4o-mini", "datastores": []string{store}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a struct{ ID string }
	r.JSON(t, &a)
	return a.ID
}

// settled waits for ingestion to end (synced or error).
func (f kfix) settled(t *testing.T, key, id string) datasource {
	t.Helper()
	// Polled in the database, not over the API, so as not to spend the key's limits.
	var d datasource
	require.Eventually(t, func() bool {
		ctx := context.Background()
		tx, err := f.App.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", orgOf(f, key).String())
		require.NoError(t, err)
		err = tx.QueryRow(ctx, "SELECT id::text, status, error, type, chunk_count FROM datasources WHERE id = $1", id).Scan(&d.ID, &d.Status, &d.Error, &d.Type, &d.ChunkCount)
		return err == nil && (d.Status == "synced" || d.Status == "error")
	}, 20*time.Second, 50*time.Millisecond, "datasource %s did not settle", id)
	return d
}

func orgOf(f kfix, key string) uuid.UUID {
	if key == f.B.Key {
		return f.B.ID
	}
	return f.A.ID
}

type result struct {
	Chunk, Source, DatasourceID, DatasourceName, Title, Heading string
	Score                                                       float64
}

func (f kfix) query(t *testing.T, key, store string, body any) (int, []result) {
	t.Helper()
	r := f.Do("POST", "/api/datastores/"+store+"/query", key, body)
	var out struct{ Results []result }
	if r.Status == 200 {
		r.JSON(t, &out)
	}
	return r.Status, out.Results
}

const faq = `# Store FAQ
## Opening hours
Our shop opens at nine in the morning and closes at six in the evening, Monday to Saturday. On Sundays we are closed.

## Returns
You can send back any item within thirty days of delivery for a full refund, provided it is unused.

## Shipping
Parcels leave our warehouse in Lyon every weekday and reach most European addresses within three working days.
`

func TestIngestSearchAndChatWithSources(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t, testenv.WithWorkers)}
	store := f.datastore(t, f.A.Key, "FAQ")
	// Uploaded as a file, as a user would.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "faq.md")
	fw.Write([]byte(faq))
	mw.Close()
	resp0 := f.Post("/api/datastores/"+store+"/datasources", map[string]string{"Authorization": "Bearer " + f.A.Key, "Content-Type": mw.FormDataContentType()}, body.String())
	require.Equal(t, http.StatusCreated, resp0.StatusCode)
	var ds datasource
	require.NoError(t, json.NewDecoder(resp0.Body).Decode(&ds))
	resp0.Body.Close()
	require.Equal(t, "pending", ds.Status)
	require.Equal(t, "file", ds.Type)
	ds = f.settled(t, f.A.Key, ds.ID)
	require.Equal(t, "synced", ds.Status, ds.Error)
	require.Positive(t, ds.ChunkCount)

	// A paraphrase: "refund" and "return", "days" shared; no exact phrasing.
	status, rs := f.query(t, f.A.Key, store, map[string]any{"query": "How long do I have to return something for my money back?", "topK": 2})
	require.Equal(t, 200, status)
	require.NotEmpty(t, rs)
	require.Contains(t, rs[0].Chunk, "thirty days")
	require.Equal(t, "Store FAQ", rs[0].Title)
	require.Equal(t, "Store FAQ > Returns", rs[0].Heading, "a result names its section")
	for _, r := range rs {
		require.True(t, r.Score > 0 && r.Score <= 1, "score %v", r.Score)
		require.Equal(t, "faq.md", r.DatasourceName)
	}
	status, rs = f.query(t, f.A.Key, store, map[string]any{"query": "when does the shop open?"})
	require.Equal(t, 200, status)
	require.Contains(t, rs[0].Chunk, "opens at nine")

	// An agent answering from the datastore, through the offline engine.
	r := f.Do("POST", "/api/agents", f.A.Key, map[string]any{"name": "Shop", "instructions": "Answer from the FAQ.", "datastores": []string{store}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var agent struct {
		ID         string
		Datastores []string
	}
	r.JSON(t, &agent)
	require.Equal(t, []string{store}, agent.Datastores)

	r = f.Do("POST", "/api/v2/agent/"+agent.ID+"/chat", f.A.Key, `{"query":"When does the shop open on Saturday?","conversationId":"k1"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var rep struct {
		Answer  string
		Sources []struct {
			Source, DatasourceName, Chunk, Heading string
			Score                                  float64
		}
		Metadata struct{ Provider string }
	}
	r.JSON(t, &rep)
	require.Equal(t, "local", rep.Metadata.Provider)
	require.Contains(t, rep.Answer, "opens at nine")
	require.NotEmpty(t, rep.Sources)
	require.Equal(t, "faq.md", rep.Sources[0].DatasourceName)
	require.Contains(t, rep.Sources[0].Chunk, "opens at nine")
	require.Equal(t, "Store FAQ > Opening hours", rep.Sources[0].Heading, "a source names its section")
	require.True(t, rep.Sources[0].Score > 0 && rep.Sources[0].Score <= 1)

	// A filter to the agent's datasource finds the same; one naming a
	// datasource that is not in the agent's datastores is refused, naming
	// it, before anything is stored (it had found nothing, silently).
	r = f.Do("POST", "/api/v2/agent/"+agent.ID+"/chat", f.A.Key, map[string]any{
		"query": "When does the shop open on Saturday?", "conversationId": "k-filtered", "filters": map[string]any{"datasourceIds": []string{ds.ID}},
	})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &rep)
	require.NotEmpty(t, rep.Sources)
	require.Equal(t, "faq.md", rep.Sources[0].DatasourceName)
	unknown := uuid.NewString()
	r = f.Do("POST", "/api/v2/agent/"+agent.ID+"/chat", f.A.Key, map[string]any{
		"query": "When does the shop open?", "conversationId": "k-unknown", "filters": map[string]any{"datasourceIds": []string{ds.ID, unknown}},
	})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "filters.datasourceIds[1]", r.Err(t).Error.Field)
	require.Contains(t, r.Err(t).Error.Message, unknown)
	r = f.Do("GET", "/api/v2/conversations/k-unknown", f.A.Key, nil)
	require.Equal(t, http.StatusNotFound, r.Status, "nothing stored: %s", r.Body)

	// The stream names its sources before its tokens.
	resp := f.Post("/api/v2/agent/"+agent.ID+"/chat", map[string]string{"Authorization": "Bearer " + f.A.Key},
		`{"query":"Where do parcels leave from?","conversationId":"k2","streaming":true}`)
	defer resp.Body.Close()
	var types []string
	var text strings.Builder
	var headings []any
	for _, ev := range testenv.ReadSSE(t, resp.Body) {
		var m map[string]any
		if json.Unmarshal([]byte(ev.Data), &m) != nil {
			continue
		}
		types = append(types, m["type"].(string))
		if m["type"] == "token" {
			text.WriteString(m["value"].(string))
		}
		if src, ok := m["source"].(map[string]any); ok {
			headings = append(headings, src["heading"])
		}
	}
	require.Equal(t, "source", types[0])
	require.Equal(t, "Store FAQ > Shipping", headings[0], "a source event names its section")
	require.Contains(t, text.String(), "Lyon")
	firstToken := -1
	lastSource := -1
	for i, ty := range types {
		if ty == "token" && firstToken < 0 {
			firstToken = i
		}
		if ty == "source" {
			lastSource = i
		}
	}
	require.Less(t, lastSource, firstToken, "sources come before the tokens")
}

func TestFileUploadAndDatasourceFilters(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t, testenv.WithWorkers)}
	store := f.datastore(t, f.A.Key, "Docs")
	upload := func(name string, content []byte) (int, []byte) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, _ := mw.CreateFormFile("file", name)
		fw.Write(content)
		mw.WriteField("name", "Uploaded "+name)
		mw.Close()
		resp := f.Post("/api/datastores/"+store+"/datasources", map[string]string{"Authorization": "Bearer " + f.A.Key, "Content-Type": mw.FormDataContentType()}, body.String())
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
	status, body := upload("warranty.md", []byte("# Warranty\nEvery appliance carries a two year warranty covering parts and labour.\n"))
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var up datasource
	require.NoError(t, json.Unmarshal(body, &up))
	require.Equal(t, "synced", f.settled(t, f.A.Key, up.ID).Status)

	status, body = upload("photo.bin", []byte{0x89, 'P', 'N', 'G', 0, 1, 2, 3, 0xff, 0xfe})
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	require.Contains(t, string(body), `"field":"file"`)

	other := f.source(t, f.A.Key, store, map[string]any{"type": "qa", "question": "Is the warranty transferable?", "answer": "Yes, the warranty follows the appliance to its new owner.", "sourceUrl": "https://shop.example/warranty"})
	// A name taken from a long question keeps to a name's 300 characters.
	long := f.source(t, f.A.Key, f.datastore(t, f.A.Key, "Names"), map[string]any{"type": "qa", "question": strings.Repeat("Is it é? ", 1000), "answer": "Yes."})
	require.Equal(t, 300, utf8.RuneCountInString(long.Name))
	require.True(t, strings.HasSuffix(long.Name, "…"), long.Name)
	require.Equal(t, "synced", f.settled(t, f.A.Key, other.ID).Status)

	_, all := f.query(t, f.A.Key, store, map[string]any{"query": "warranty", "topK": 10})
	require.Len(t, all, 2)
	_, only := f.query(t, f.A.Key, store, map[string]any{"query": "warranty", "filters": map[string]any{"datasourceIds": []string{other.ID}}})
	require.Len(t, only, 1)
	require.Equal(t, other.ID, only[0].DatasourceID)
	require.Equal(t, "https://shop.example/warranty", only[0].Source)

	for _, k := range []int{-1, 0, 51} {
		r := f.Do("POST", "/api/datastores/"+store+"/query", f.A.Key, map[string]any{"query": "warranty", "topK": k})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
		require.Equal(t, "topK", r.Err(t).Error.Field)
		require.Equal(t, "topK: must be between 1 and 50", r.Err(t).Error.Message, "topK %d: the documented bounds", k)
	}
	r := f.Do("POST", "/api/datastores/"+store+"/query", f.A.Key, map[string]any{"query": "warranty", "filters": map[string]any{"datasourceIds": []string{"nope"}}})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "filters.datasourceIds[0]", r.Err(t).Error.Field, "named as the body holds it")
	// A datasource of another datastore of the organization is not in this one.
	elsewhere := f.source(t, f.A.Key, f.datastore(t, f.A.Key, "elsewhere"), map[string]any{"type": "text", "text": "Warranty claims go to the manufacturer."})
	r = f.Do("POST", "/api/datastores/"+store+"/query", f.A.Key, map[string]any{"query": "warranty", "filters": map[string]any{"datasourceIds": []string{other.ID, elsewhere.ID}}})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "filters.datasourceIds[1]", r.Err(t).Error.Field)
	require.True(t, strings.HasPrefix(r.Err(t).Error.Message, "filters.datasourceIds[1]"), r.Err(t).Error.Message)
}

// An uploaded file's datasource is named after the file alone, whichever
// separator its folders were sent with, and an upload is read as one
// whatever the case of its media type.
func TestUploadNamedAfterTheFileAlone(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t)}
	store := f.datastore(t, f.A.Key, "Uploads")
	upload := func(fileName, contentType string) datasource {
		t.Helper()
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, err := mw.CreateFormFile("file", fileName)
		require.NoError(t, err)
		_, err = fw.Write([]byte("Returns are accepted within thirty days."))
		require.NoError(t, err)
		require.NoError(t, mw.Close())
		resp := f.Post("/api/datastores/"+store+"/datasources", map[string]string{
			"Authorization": "Bearer " + f.A.Key, "Content-Type": strings.Replace(mw.FormDataContentType(), "multipart/form-data", contentType, 1),
		}, body.String())
		defer resp.Body.Close()
		var b bytes.Buffer
		_, err = b.ReadFrom(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s: %s", fileName, b.String())
		var d datasource
		require.NoError(t, json.Unmarshal(b.Bytes(), &d))
		return d
	}
	for _, c := range []struct{ fileName, want string }{
		{"returns.txt", "returns.txt"},
		{"shop/policies/returns.txt", "returns.txt"},
		// A Windows client's path: the client's folders were the name.
		{`C:\Users\ann\Documents\returns.txt`, "returns.txt"},
		{`..\..\returns.txt`, "returns.txt"},
		// No name left: "." and "/" were the name.
		{".", "upload"},
		{"/", "upload"},
	} {
		require.Equal(t, c.want, upload(c.fileName, "multipart/form-data").Name, "%q", c.fileName)
	}
	// Media types are case-insensitive: it was read as JSON, and refused.
	require.Equal(t, "returns.txt", upload("returns.txt", "Multipart/Form-Data").Name)
}

// A question's source URL is cited with the answer: one without a host
// leads nowhere, and is refused as any other that is not http or https.
func TestQASourceURLNeedsAHost(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t)}
	store := f.datastore(t, f.A.Key, "FAQ")
	for _, u := range []string{"http://", "https://", "https:faq", "http:///faq", "ftp://shop.example/faq"} {
		r := f.Do("POST", "/api/datastores/"+store+"/datasources", f.A.Key, map[string]any{"type": "qa", "question": "Q?", "answer": "A.", "sourceUrl": u})
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", u, r.Body)
		require.Equal(t, "sourceUrl", r.Err(t).Error.Field, "%s", u)
	}
	r := f.Do("GET", "/api/datastores/"+store+"/datasources", f.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"datasources":[]`, "nothing stored")
	ds := f.source(t, f.A.Key, store, map[string]any{"type": "qa", "question": "Q?", "answer": "A.", "sourceUrl": "https://shop.example/faq"})
	require.Equal(t, "Q?", ds.Name)
}

func TestKnowledgeTenantIsolation(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t, testenv.WithWorkers)}
	storeA := f.datastore(t, f.A.Key, "A")
	storeB := f.datastore(t, f.B.Key, "B")
	a := f.source(t, f.A.Key, storeA, map[string]any{"type": "text", "text": "The launch code for project Falcon is ALPHA-1."})
	b := f.source(t, f.B.Key, storeB, map[string]any{"type": "text", "text": "The launch code for project Falcon is BRAVO-2."})
	f.settled(t, f.A.Key, a.ID)
	f.settled(t, f.B.Key, b.ID)

	_, ra := f.query(t, f.A.Key, storeA, map[string]any{"query": "launch code for project Falcon", "topK": 10})
	require.Len(t, ra, 1)
	require.Contains(t, ra[0].Chunk, "ALPHA-1")
	_, rb := f.query(t, f.B.Key, storeB, map[string]any{"query": "launch code for project Falcon", "topK": 10})
	require.Len(t, rb, 1)
	require.Contains(t, rb[0].Chunk, "BRAVO-2")

	// B cannot query, read, list or delete A's knowledge, nor filter into it.
	status, _ := f.query(t, f.B.Key, storeA, map[string]any{"query": "launch code"})
	require.Equal(t, 403, status)
	r := f.Do("POST", "/api/datastores/"+storeB+"/query", f.B.Key, map[string]any{"query": "launch code", "filters": map[string]any{"datasourceIds": []string{a.ID}}})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "filters.datasourceIds[0]", r.Err(t).Error.Field)
	require.Contains(t, r.Err(t).Error.Message, fmt.Sprintf("datasource %q is not in this datastore", a.ID))
	for _, req := range [][2]string{{"GET", "/api/datastores/" + storeA}, {"GET", "/api/datasources/" + a.ID}, {"DELETE", "/api/datasources/" + a.ID}, {"GET", "/api/datastores/" + storeA + "/datasources"}} {
		r := f.Do(req[0], req[1], f.B.Key, nil)
		require.Equal(t, 403, r.Status, "%s %s: %s", req[0], req[1], r.Body)
	}
	r = f.Do("GET", "/api/datastores", f.B.Key, nil)
	require.NotContains(t, string(r.Body), storeA)

	// B cannot attach A's datastore to its agent; nothing is created.
	r = f.Do("POST", "/api/agents", f.B.Key, map[string]any{"name": "spy", "instructions": "x", "datastores": []string{storeA}})
	require.Equal(t, 403, r.Status, "%s", r.Body)
	r = f.Do("GET", "/api/agents", f.B.Key, nil)
	require.Contains(t, string(r.Body), `"total":0`)

	// Each organization's agent answers from its own chunks only.
	for _, c := range []struct{ key, store, want, not string }{{f.A.Key, storeA, "ALPHA-1", "BRAVO"}, {f.B.Key, storeB, "BRAVO-2", "ALPHA"}} {
		r := f.Do("POST", "/api/agents", c.key, map[string]any{"name": "bot", "instructions": "x", "datastores": []string{c.store}})
		require.Equal(t, 201, r.Status, "%s", r.Body)
		var ag struct{ ID string }
		r.JSON(t, &ag)
		r = f.Do("POST", "/api/v2/agent/"+ag.ID+"/chat", c.key, `{"query":"What is the launch code for project Falcon?","conversationId":"c"}`)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		require.Contains(t, string(r.Body), c.want)
		require.NotContains(t, string(r.Body), c.not)
	}
}

func TestWebPagesThroughTheGuard(t *testing.T) {
	t.Parallel()
	site := http.NewServeMux()
	site.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><head><title>Home</title></head><body><article><h1>Welcome</h1><p>Our bakery sells sourdough bread baked every single morning before dawn.</p><a href="/about">About</a> <a href="/contact">Contact</a> <a href="https://elsewhere.example/x">Away</a></article></body></html>`)
	})
	site.HandleFunc("/about", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><head><title>About</title></head><body><article><h1>About us</h1><p>The bakery was founded in 1921 by two sisters who loved rye and spelt flour.</p></article></body></html>`)
	})
	site.HandleFunc("/contact", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html><head><title>Contact</title></head><body><article><h1>Contact</h1><p>Call the bakery at any hour; the phone line is staffed by our night shift bakers.</p></article></body></html>`)
	})
	site.HandleFunc("/sitemap.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://%s/about</loc></url><url><loc>http://%s/contact</loc></url></urlset>`, r.Host, r.Host)
	})
	srv := httptest.NewServer(site)
	defer srv.Close()

	// By default, loopback is refused, at once: a 400 naming the url (a
	// name is checked when the job connects, whatever it resolves to then).
	f := kfix{testenv.New(t, testenv.WithWorkers)}
	store := f.datastore(t, f.A.Key, "Web")
	for _, bad := range []string{srv.URL, "http://localhost:8080/", "http://[::1]/", "http://10.0.0.1/"} {
		r := f.Do("POST", "/api/datastores/"+store+"/datasources", f.A.Key, map[string]any{"type": "web_site", "url": bad})
		require.Equal(t, 400, r.Status, "%s: %s", bad, r.Body)
		require.Equal(t, "url", r.Err(t).Error.Field, "%s", r.Body)
	}
	require.Contains(t, f.Do("POST", "/api/datastores/"+store+"/datasources", f.A.Key, map[string]any{"type": "web_page", "url": srv.URL}).Err(t).Error.Message, "not a public address")
	_, rs := f.query(t, f.A.Key, store, map[string]any{"query": "sourdough bread"})
	require.Empty(t, rs)
	for _, bad := range []string{"file:///etc/passwd", "gopher://x/", "http://2130706433/"} {
		r := f.Do("POST", "/api/datastores/"+store+"/datasources", f.A.Key, map[string]any{"type": "web_page", "url": bad})
		require.Equal(t, 400, r.Status, "%s: %s", bad, r.Body)
	}

	// An operator who allows the range (intranet) gets the pages.
	g := kfix{testenv.New(t, testenv.WithWorkers, func(c *server.Config) { c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })}
	store = g.datastore(t, g.A.Key, "Web")
	page := g.settled(t, g.A.Key, g.source(t, g.A.Key, store, map[string]any{"type": "web_page", "url": srv.URL + "/about"}).ID)
	require.Equal(t, "synced", page.Status, page.Error)
	siteDS := g.settled(t, g.A.Key, g.source(t, g.A.Key, store, map[string]any{"type": "web_site", "url": srv.URL + "/", "maxPages": 2}).ID)
	require.Equal(t, "synced", siteDS.Status, siteDS.Error)
	_, rs = g.query(t, g.A.Key, store, map[string]any{"query": "sourdough bread", "filters": map[string]any{"datasourceIds": []string{siteDS.ID}}, "topK": 10})
	require.NotEmpty(t, rs)
	require.Equal(t, srv.URL+"/", rs[0].Source)
	_, rs = g.query(t, g.A.Key, store, map[string]any{"query": "night shift phone", "filters": map[string]any{"datasourceIds": []string{siteDS.ID}}, "topK": 10})
	for _, r := range rs {
		require.NotContains(t, r.Chunk, "night shift", "maxPages 2 crawled a third page")
	}
	sitemap := g.settled(t, g.A.Key, g.source(t, g.A.Key, store, map[string]any{"type": "web_site", "url": srv.URL + "/sitemap.xml"}).ID)
	require.Equal(t, "synced", sitemap.Status, sitemap.Error)
	require.Equal(t, 2, sitemap.ChunkCount)
	_ = context.Background
}

func TestCrawlBounds(t *testing.T) {
	t.Parallel()
	var pages atomic.Int64
	site := http.NewServeMux()
	site.HandleFunc("/sitemap.xml", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">`)
		for i := 0; i < 5000; i++ {
			fmt.Fprintf(w, "<url><loc>http://%s/p/%d</loc></url>", r.Host, i)
		}
		fmt.Fprint(w, `</urlset>`)
	})
	site.HandleFunc("/p/", func(w http.ResponseWriter, r *http.Request) {
		pages.Add(1)
		fmt.Fprintf(w, "<html><body><article><h1>Page</h1><p>This is page %s with some words about sourdough and rye bread.</p></article></body></html>", r.URL.Path)
	})
	srv := httptest.NewServer(site)
	defer srv.Close()
	f := kfix{testenv.New(t, testenv.WithWorkers, func(c *server.Config) { c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })}
	store := f.datastore(t, f.A.Key, "Web")
	ds := f.settled(t, f.A.Key, f.source(t, f.A.Key, store, map[string]any{"type": "web_site", "url": srv.URL + "/sitemap.xml", "maxPages": 3}).ID)
	require.Equal(t, "synced", ds.Status, ds.Error)
	require.Equal(t, 3, ds.ChunkCount)
	require.EqualValues(t, 3, pages.Load(), "a sitemap of 5000 URLs fetched past the page cap")

	// A site that does not answer: a clear error, no chunks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	down := f.settled(t, f.A.Key, f.source(t, f.A.Key, store, map[string]any{"type": "web_page", "url": "http://" + addr + "/"}).ID)
	require.Equal(t, "error", down.Status)
	require.Contains(t, down.Error, "fetching")
	require.Zero(t, down.ChunkCount)
}
