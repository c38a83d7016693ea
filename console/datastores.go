package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/knowledge"
)

// Knowledge: datastores, their datasources (added as text, files, web
// pages and sites), ingestion statuses that refresh by themselves, and a
// search box.

// searchTopK is how many chunks the search box shows.
const searchTopK = 10

func (c *Console) dsList(w http.ResponseWriter, r *http.Request) {
	c.dsListWith(w, r, http.StatusOK, nil, "")
}

// datastoresWith renders the list, with the create form's values and error
// after a refused create.
func (c *Console) dsListWith(w http.ResponseWriter, r *http.Request, status int, form *parleyv1.CreateDatastoreRequest, formErr string) {
	req := &parleyv1.ListDatastoresRequest{Cursor: r.URL.Query().Get("cursor")}
	err := c.validate(req)
	var list *parleyv1.ListDatastoresResponse
	if err == nil {
		list, err = c.Datastores.ListDatastores(r.Context(), req)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	if form == nil {
		form = &parleyv1.CreateDatastoreRequest{}
	}
	render(w, r, status, dsListPage(viewOf(r.Context()), dsListView{Stores: list.GetDatastores(), Cursor: req.GetCursor(), Next: list.GetNextCursor()}, form, formErr))
}

// dsListView is a page of the datastores list.
type dsListView struct {
	Stores       []*parleyv1.Datastore
	Cursor, Next string
}

func (c *Console) dsCreate(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.errorPage(w, r, apperr.New(apperr.Invalid, "unreadable form"))
		return
	}
	req := &parleyv1.CreateDatastoreRequest{
		Name: strings.TrimSpace(r.PostForm.Get("name")), Description: strings.TrimSpace(r.PostForm.Get("description")),
	}
	err := c.validate(req)
	var resp *parleyv1.CreateDatastoreResponse
	if err == nil {
		resp, err = c.Datastores.CreateDatastore(r.Context(), req)
	}
	if err != nil {
		if status, msg, ok := dsFormError(err); ok {
			c.dsListWith(w, r, status, req, msg)
			return
		}
		c.errorPage(w, r, err)
		return
	}
	c.flash(r.Context(), "The datastore “"+resp.GetDatastore().GetName()+"” was created. Add documents to it below.")
	http.Redirect(w, r, "/console/datastores/"+resp.GetDatastore().GetId(), http.StatusSeeOther)
}

// dsFormError tells a refusal to show beside a form (its status and message)
// from one that deserves an error page (internal errors, and ids that are
// not found or another organization's).
func dsFormError(err error) (int, string, bool) {
	pub := shown(err)
	switch pub.Code {
	case apperr.Internal, apperr.NotFound, apperr.Forbidden, apperr.Unauthenticated:
		return 0, "", false
	}
	return apperr.Lookup(pub.Code).HTTPStatus, pub.Message, true
}

// dsView is what the datastore page shows.
type dsView struct {
	Store   *parleyv1.Datastore
	Sources []*parleyv1.Datasource
	// Cursor is the page of datasources shown (empty for the newest);
	// Next the following page's, empty on the last.
	Cursor, Next string
	// Form holds the values of a refused add, to fill the form again;
	// FormErr says why, and FormType which form it was.
	Form     *parleyv1.CreateDatasourceRequest
	FormType string
	FormErr  string
	// Query and Results are the search box's.
	Query    string
	Searched bool
	Results  []*parleyv1.QueryResult
}

// dsLoad fills the datastore and the page of its datasources that
// ?cursor= names (the newest without).
func (c *Console) dsLoad(r *http.Request, id string) (*dsView, error) {
	get := &parleyv1.GetDatastoreRequest{Id: id}
	if err := c.validate(get); err != nil {
		return nil, err
	}
	ds, err := c.Datastores.GetDatastore(r.Context(), get)
	if err != nil {
		return nil, err
	}
	list := &parleyv1.ListDatasourcesRequest{DatastoreId: ds.GetDatastore().GetId(), Cursor: r.URL.Query().Get("cursor")}
	if err := c.validate(list); err != nil {
		return nil, err
	}
	sources, err := c.Datastores.ListDatasources(r.Context(), list)
	if err != nil {
		return nil, err
	}
	return &dsView{
		Store: ds.GetDatastore(), Sources: sources.GetDatasources(), Cursor: list.GetCursor(), Next: sources.GetNextCursor(),
		Form: &parleyv1.CreateDatasourceRequest{},
	}, nil
}

// dsURL is a datastore's page (or its sources table, with suffix
// "/sources") at a page of its datasources.
func dsURL(id, suffix, cursor string) string {
	u := "/console/datastores/" + id + suffix
	if cursor != "" {
		u += "?cursor=" + url.QueryEscape(cursor)
	}
	return u
}

func (c *Console) dsShow(w http.ResponseWriter, r *http.Request) {
	d, err := c.dsLoad(r, r.PathValue("id"))
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, http.StatusOK, dsPage(viewOf(r.Context()), d))
}

// dsSources is the datasources table alone, which the page polls
// while some datasource is still pending or running.
func (c *Console) dsSources(w http.ResponseWriter, r *http.Request) {
	d, err := c.dsLoad(r, r.PathValue("id"))
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, http.StatusOK, dsSourcesTable(viewOf(r.Context()), d))
}

func (c *Console) dsSearch(w http.ResponseWriter, r *http.Request) {
	d, err := c.dsLoad(r, r.PathValue("id"))
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	d.Query = r.URL.Query().Get("q")
	status := http.StatusOK
	if d.Query != "" {
		req := &parleyv1.QueryRequest{DatastoreId: d.Store.GetId(), Query: d.Query, TopK: searchTopK}
		err := c.validate(req)
		var resp *parleyv1.QueryResponse
		if err == nil {
			resp, err = c.Datastores.Query(r.Context(), req)
		}
		if err != nil {
			var ok bool
			if status, d.FormErr, ok = dsFormError(err); !ok {
				c.errorPage(w, r, err)
				return
			}
			d.FormType = "search"
		} else {
			d.Searched, d.Results = true, resp.GetResults()
		}
	}
	render(w, r, status, dsPage(viewOf(r.Context()), d))
}

// dsAdd adds text, a web page or a web site (a form post) or a file
// (multipart, read as the REST API reads it).
func (c *Console) dsAdd(w http.ResponseWriter, r *http.Request) {
	req := &parleyv1.CreateDatasourceRequest{DatastoreId: r.PathValue("id")}
	release, err := c.Datastores.Uploads.Hold(r, knowledge.MaxUploadBytes)
	if err != nil {
		c.dsRefused(w, r, req, err)
		return
	}
	defer release()
	var readErr error
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		readErr = knowledge.ReadUpload(w, r, req)
	} else if err := readTextForm(w, r); err != nil {
		readErr = err
	} else {
		f := r.PostForm
		req.Type, req.Name = f.Get("type"), strings.TrimSpace(f.Get("name"))
		switch req.Type {
		case "text":
			req.Text = f.Get("text")
			if strings.TrimSpace(req.Text) == "" {
				readErr = apperr.InvalidField("text", "must not be blank")
			}
		case "web_page", "web_site":
			req.Url = strings.TrimSpace(f.Get("url"))
			if req.Url == "" {
				readErr = apperr.InvalidField("url", "must not be blank")
			}
			if mp := strings.TrimSpace(f.Get("maxPages")); req.Type == "web_site" && mp != "" {
				n, err := strconv.ParseInt(mp, 10, 32)
				if err != nil || n < 1 {
					readErr = apperr.InvalidField("maxPages", "must be a whole number from 1 to 1000")
				}
				req.MaxPages = int32(n)
			}
		default:
			readErr = apperr.InvalidField("type", "must be text, file, web_page or web_site")
		}
	}
	err = readErr
	if err == nil {
		err = c.validate(req)
	}
	var resp *parleyv1.CreateDatasourceResponse
	if err == nil {
		resp, err = c.Datastores.CreateDatasource(r.Context(), req)
	}
	if err != nil {
		c.dsRefused(w, r, req, err)
		return
	}
	c.flash(r.Context(), "“"+resp.GetDatasource().GetName()+"” was added; it is being ingested.")
	http.Redirect(w, r, "/console/datastores/"+req.GetDatastoreId(), http.StatusSeeOther)
}

// readTextForm parses the text and web forms' body, up to the REST API's
// limit for the same request: a text of the schema's 5,000,000 characters
// is several times that percent-encoded, past the 10 MB ParseForm reads
// by itself (and refuses as if malformed).
func readTextForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, knowledge.MaxUploadBytes)
	err := r.ParseForm()
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &apperr.Error{Code: apperr.TooLarge, Field: "text",
			Message: fmt.Sprintf("text: the form is larger than the %d bytes allowed; add the text as a file", knowledge.MaxUploadBytes)}
	}
	if err != nil {
		return apperr.New(apperr.Invalid, "unreadable form")
	}
	return nil
}

// dsRefused shows the datastore page again with the form's values
// and why they were refused: 413 for a file too large, else the error's
// status. A file's errors name the file.
func (c *Console) dsRefused(w http.ResponseWriter, r *http.Request, req *parleyv1.CreateDatasourceRequest, err error) {
	status, msg, ok := dsFormError(err)
	if !ok {
		c.errorPage(w, r, err)
		return
	}
	var tooBig *knowledge.TooLargeError
	if errors.As(err, &tooBig) {
		status = http.StatusRequestEntityTooLarge
		if req.FileName == "" {
			req.FileName = tooBig.FileName
		}
	}
	if req.GetType() == "file" || tooBig != nil {
		if name := req.GetFileName(); name != "" && shown(err).Field == "file" {
			msg = fmt.Sprintf("file “%s”: %s", name, strings.TrimPrefix(msg, "file: "))
		}
	}
	d, lerr := c.dsLoad(r, req.GetDatastoreId())
	if lerr != nil {
		c.errorPage(w, r, lerr)
		return
	}
	req.File = nil // never echoed back
	d.Form, d.FormType, d.FormErr = req, dsFormType(req, tooBig != nil), msg
	render(w, r, status, dsPage(viewOf(r.Context()), d))
}

func dsFormType(req *parleyv1.CreateDatasourceRequest, upload bool) string {
	switch {
	case upload || req.GetType() == "file":
		return "file"
	case req.GetType() == "web_page" || req.GetType() == "web_site":
		return "web"
	}
	return "text"
}

// dsAction runs a change on one datasource and returns to its
// datastore.
func (c *Console) dsAction(w http.ResponseWriter, r *http.Request, done string, act func(id string) error) {
	get := &parleyv1.GetDatasourceRequest{Id: r.PathValue("id")}
	err := c.validate(get)
	var ds *parleyv1.GetDatasourceResponse
	if err == nil {
		ds, err = c.Datastores.GetDatasource(r.Context(), get)
	}
	if err == nil {
		err = act(ds.GetDatasource().GetId())
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.flash(r.Context(), "“"+ds.GetDatasource().GetName()+"” "+done)
	http.Redirect(w, r, "/console/datastores/"+ds.GetDatasource().GetDatastoreId(), http.StatusSeeOther)
}

func (c *Console) dsDelete(w http.ResponseWriter, r *http.Request) {
	c.dsAction(w, r, "was deleted.", func(id string) error {
		req := &parleyv1.DeleteDatasourceRequest{Id: id}
		if err := c.validate(req); err != nil {
			return err
		}
		_, err := c.Datastores.DeleteDatasource(r.Context(), req)
		return err
	})
}

func (c *Console) dsResync(w http.ResponseWriter, r *http.Request) {
	c.dsAction(w, r, "is being ingested again.", func(id string) error {
		req := &parleyv1.ResyncDatasourceRequest{Id: id}
		if err := c.validate(req); err != nil {
			return err
		}
		_, err := c.Datastores.ResyncDatasource(r.Context(), req)
		return err
	})
}

// dsSettling reports whether some datasource is still pending or running:
// the table polls for news only then.
func dsSettling(sources []*parleyv1.Datasource) bool {
	for _, s := range sources {
		if s.GetStatus() == "pending" || s.GetStatus() == "running" {
			return true
		}
	}
	return false
}

func dsSourceLabel(t string) string {
	switch t {
	case "web_page":
		return "web page"
	case "web_site":
		return "web site"
	case "qa":
		return "Q&A"
	}
	return t
}

func dsScore(s float64) string { return strconv.FormatFloat(s, 'f', 3, 64) }

func dsCount(n int64) string { return strconv.FormatInt(n, 10) }

// dsPlural counts things in English: 1 chunk, 2 chunks.
func dsPlural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return dsCount(n) + " " + thing + "s"
}

// dsFormValue fills a form's field again after its own refused post only.
func dsFormValue(d *dsView, kind, value string) string {
	if d.FormType != kind {
		return ""
	}
	return value
}

func dsMaxPages(d *dsView) string {
	if d.FormType != "web" || d.Form.GetMaxPages() == 0 {
		return ""
	}
	return strconv.Itoa(int(d.Form.GetMaxPages()))
}

func dsMaxFileMiB() string { return strconv.Itoa(knowledge.MaxFileBytes >> 20) }
