package console

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/form"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// Forms: the organization's forms, a builder for their fields (one row per
// field and a blank row to add one; no script needed), their submissions
// in a table with the fields as columns, and the CSV export.

// formFieldTypes are the builder's type choices, in the schema's words.
var formFieldTypes = []string{
	form.Text, form.Textarea, form.Email, form.Phone, form.Number, form.URL, form.Date,
	form.Select, form.Multiselect, form.Checkbox,
}

// formsService reads and writes as the member: its organization scopes
// every query. Keyless callers never come through the console, so it
// needs no gate.
func (c *Console) formsService() *form.Service { return &form.Service{Store: c.Store} }

// formsListView is what the forms page shows.
type formsListView struct {
	Page    *parleyv1.ListFormsResponse
	Cursor  string
	Form    *parleyv1.CreateFormRequest
	FormErr string
}

func (c *Console) formsList(w http.ResponseWriter, r *http.Request) {
	c.formsListWith(w, r, http.StatusOK, &parleyv1.CreateFormRequest{}, "")
}

func (c *Console) formsListWith(w http.ResponseWriter, r *http.Request, status int, create *parleyv1.CreateFormRequest, formErr string) {
	d := formsListView{Cursor: r.URL.Query().Get("cursor"), Form: create, FormErr: formErr}
	req := &parleyv1.ListFormsRequest{Cursor: d.Cursor, Limit: form.MaxPageSize}
	err := c.validate(req)
	if err == nil {
		d.Page, err = c.formsService().ListForms(r.Context(), req)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, status, formsListPage(viewOf(r.Context()), d))
}

func (c *Console) formsCreate(w http.ResponseWriter, r *http.Request) {
	if err := readForm(w, r); err != nil {
		c.errorPage(w, r, err)
		return
	}
	req := &parleyv1.CreateFormRequest{
		Name: strings.TrimSpace(r.PostForm.Get("name")), Description: strings.TrimSpace(r.PostForm.Get("description")),
		Fields: []*parleyv1.FormField{},
	}
	err := c.validate(req)
	var resp *parleyv1.CreateFormResponse
	if err == nil {
		resp, err = c.formsService().CreateForm(r.Context(), req)
	}
	if err != nil {
		if status, msg, ok := formError(err); ok && apperr.CodeOf(err) == apperr.Invalid {
			c.formsListWith(w, r, status, req, msg)
			return
		}
		c.errorPage(w, r, err)
		return
	}
	c.flash(r.Context(), "The form “"+resp.GetForm().GetName()+"” was created. Add its fields below.")
	http.Redirect(w, r, "/console/forms/"+resp.GetForm().GetId(), http.StatusSeeOther)
}

// formBuilderView is what a form's page shows: the form as stored, or as
// the member sent it when it was refused.
type formBuilderView struct {
	Form    *parleyv1.Form
	FormErr string
}

func (c *Console) formsShow(w http.ResponseWriter, r *http.Request) {
	f, err := c.formsGet(r)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, http.StatusOK, formBuilderPage(viewOf(r.Context()), formBuilderView{Form: f}))
}

// formsGet reads the path's form. SECURITY: another organization's form
// is not found (errorPage).
func (c *Console) formsGet(r *http.Request) (*parleyv1.Form, error) {
	req := &parleyv1.GetFormRequest{Id: r.PathValue("id")}
	if err := c.validate(req); err != nil {
		return nil, apperr.New(apperr.NotFound, "form %q not found", req.GetId())
	}
	resp, err := c.formsService().GetForm(r.Context(), req)
	if err != nil {
		return nil, err
	}
	return resp.GetForm(), nil
}

// formsSave saves the builder: the form's settings and every field row,
// in order; a row marked for removal, or the blank row left blank, is
// left out.
func (c *Console) formsSave(w http.ResponseWriter, r *http.Request) {
	if err := readForm(w, r); err != nil {
		c.errorPage(w, r, err)
		return
	}
	p := r.PostForm
	published := p.Get("published") == "on"
	sent := &parleyv1.Form{
		Id: r.PathValue("id"), Name: strings.TrimSpace(p.Get("name")), Description: strings.TrimSpace(p.Get("description")),
		SuccessMessage: strings.TrimSpace(p.Get("success_message")), Published: published,
		AllowedOrigins: splitOrigins(p.Get("allowed_origins")),
	}
	fields, err := builderFields(p)
	sent.Fields = fields
	if err == nil {
		req := &parleyv1.UpdateFormRequest{
			Id: sent.GetId(), Name: &sent.Name, Description: &sent.Description, Fields: fields,
			Published: &published, SuccessMessage: &sent.SuccessMessage, AllowedOrigins: nonNil(sent.AllowedOrigins),
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name", "description", "fields", "published", "success_message", "allowed_origins"}},
		}
		if err = c.validate(req); err == nil {
			_, err = c.formsService().UpdateForm(r.Context(), req)
		}
	}
	if err != nil {
		if status, msg, ok := formError(err); ok && apperr.CodeOf(err) == apperr.Invalid {
			// Show the builder again with what was sent, and why it was
			// refused; the form itself must still be the member's.
			stored, gerr := c.formsGet(r)
			if gerr != nil {
				c.errorPage(w, r, gerr)
				return
			}
			sent.SubmissionCount = stored.GetSubmissionCount()
			render(w, r, status, formBuilderPage(viewOf(r.Context()), formBuilderView{Form: sent, FormErr: msg}))
			return
		}
		c.errorPage(w, r, err)
		return
	}
	c.flash(r.Context(), "The form was saved.")
	http.Redirect(w, r, "/console/forms/"+sent.GetId(), http.StatusSeeOther)
}

// builderRows bounds the rows a builder post may carry: every field and
// the blank one, with room to spare.
const builderRows = form.MaxFields + 10

// builderFields reads the builder's field rows (field.<i>.<key>, i from 0),
// every one of them even when a row is refused (the first refusal is the
// error): the builder shown again keeps them all. Labels, patterns and
// options are kept as typed (a pattern's spaces are part of it), as the
// API keeps them, so that saving a form made through the API changes only
// what was edited; only the options' line ends and blank lines go.
func builderFields(p url.Values) (fields []*parleyv1.FormField, err error) {
	fields = []*parleyv1.FormField{}
	for i := range builderRows {
		key := func(k string) string { return fmt.Sprintf("field.%d.%s", i, k) }
		if _, ok := p[key("name")]; !ok {
			continue
		}
		name := strings.TrimSpace(p.Get(key("name")))
		if p.Get(key("remove")) == "on" || (p.Get(key("new")) == "1" && name == "") {
			continue
		}
		f := &parleyv1.FormField{
			Name: name, Label: p.Get(key("label")), Type: p.Get(key("type")),
			Required: p.Get(key("required")) == "on", Pattern: p.Get(key("pattern")),
			Options: []string{},
		}
		for _, o := range strings.Split(p.Get(key("options")), "\n") {
			if o = strings.TrimSuffix(o, "\r"); strings.TrimSpace(o) != "" {
				f.Options = append(f.Options, o)
			}
		}
		var bad error
		if f.Min, bad = builderNumber(p.Get(key("min")), fmt.Sprintf("fields[%d].min", len(fields))); bad != nil && err == nil {
			err = bad
		}
		if f.Max, bad = builderNumber(p.Get(key("max")), fmt.Sprintf("fields[%d].max", len(fields))); bad != nil && err == nil {
			err = bad
		}
		fields = append(fields, f)
	}
	return fields, err
}

// builderNumber reads a min or max box; blank is nil.
func builderNumber(s, field string) (*float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return nil, apperr.InvalidField(field, "must be a number")
	}
	return &n, nil
}

func (c *Console) formsDelete(w http.ResponseWriter, r *http.Request) {
	req := &parleyv1.DeleteFormRequest{Id: r.PathValue("id")}
	err := c.validate(req)
	if err == nil {
		_, err = c.formsService().DeleteForm(r.Context(), req)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.flash(r.Context(), "The form was deleted, with its submissions.")
	http.Redirect(w, r, "/console/forms", http.StatusSeeOther)
}

// formsDeleteSubmission deletes one submission (a visitor asking for what
// they sent to go), then shows the submissions again.
func (c *Console) formsDeleteSubmission(w http.ResponseWriter, r *http.Request) {
	req := &parleyv1.DeleteSubmissionRequest{FormId: r.PathValue("id"), Id: r.PathValue("sid")}
	err := c.validate(req)
	if err == nil {
		_, err = c.formsService().DeleteSubmission(r.Context(), req)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.flash(r.Context(), "The submission was deleted.")
	http.Redirect(w, r, submissionsURL(req.GetFormId(), ""), http.StatusSeeOther)
}

// formSubmissionsView is what the submissions page shows.
type formSubmissionsView struct {
	Form   *parleyv1.Form
	Page   *parleyv1.ListSubmissionsResponse
	Cursor string
	Err    string
}

func (c *Console) formsSubmissions(w http.ResponseWriter, r *http.Request) {
	f, err := c.formsGet(r)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	d := formSubmissionsView{Form: f, Cursor: r.URL.Query().Get("cursor")}
	req := &parleyv1.ListSubmissionsRequest{FormId: f.GetId(), Cursor: d.Cursor, Limit: form.DefaultPageSize}
	status := http.StatusOK
	err = c.validate(req)
	if err == nil {
		d.Page, err = c.formsService().ListSubmissions(r.Context(), req)
	}
	if err != nil {
		if apperr.CodeOf(err) != apperr.Invalid {
			c.errorPage(w, r, err)
			return
		}
		status, d.Err = http.StatusBadRequest, shown(err).Message
	}
	render(w, r, status, formSubmissionsPage(viewOf(r.Context()), d))
}

// formsCSV downloads every submission of a form (form.Service.ServeCSV).
func (c *Console) formsCSV(w http.ResponseWriter, r *http.Request) {
	if err := c.formsService().ServeCSV(w, r, r.PathValue("id")); err != nil {
		c.errorPage(w, r, err)
	}
}

// submissionCell is a stored value as the submissions table shows it.
func submissionCell(s *parleyv1.Submission, name string) string {
	v, ok := s.GetValues().GetFields()[name]
	if !ok {
		return ""
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_NumberValue:
		return strconv.FormatFloat(k.NumberValue, 'g', -1, 64)
	case *structpb.Value_BoolValue:
		if k.BoolValue {
			return "yes"
		}
		return "no"
	case *structpb.Value_ListValue:
		parts := make([]string, 0, len(k.ListValue.GetValues()))
		for _, x := range k.ListValue.GetValues() {
			parts = append(parts, x.GetStringValue())
		}
		return strings.Join(parts, ", ")
	}
	return ""
}

// formsURL is the forms listing at a cursor.
func formsURL(cursor string) string {
	if cursor == "" {
		return "/console/forms"
	}
	return "/console/forms?" + url.Values{"cursor": {cursor}}.Encode()
}

// submissionsURL is a form's submissions at a cursor.
func submissionsURL(id, cursor string) string {
	u := "/console/forms/" + id + "/submissions"
	if cursor == "" {
		return u
	}
	return u + "?" + url.Values{"cursor": {cursor}}.Encode()
}

// fieldBound shows a min or max box's value.
func fieldBound(f *float64) string {
	if f == nil {
		return ""
	}
	return strconv.FormatFloat(*f, 'f', -1, 64)
}

// fieldSummary is a field's rules in a few words, for read-only views.
func fieldSummary(f *parleyv1.FormField) string {
	var parts []string
	if f.GetRequired() {
		parts = append(parts, "required")
	}
	if len(f.GetOptions()) > 0 {
		parts = append(parts, "options: "+strings.Join(f.GetOptions(), ", "))
	}
	if f.Min != nil {
		parts = append(parts, "min "+fieldBound(f.Min))
	}
	if f.Max != nil {
		parts = append(parts, "max "+fieldBound(f.Max))
	}
	if f.GetPattern() != "" {
		parts = append(parts, "pattern "+f.GetPattern())
	}
	return strings.Join(parts, " · ")
}

// builderRow is one row of the builder: a field (nil for the blank row)
// and its index in the post.
type builderRow struct {
	I     int
	Field *parleyv1.FormField
	New   bool
}

// builderRowsOf are the builder's rows: the form's fields, then a blank
// one to add a field (unless the form has the most it may have).
func builderRowsOf(f *parleyv1.Form) []builderRow {
	rows := make([]builderRow, 0, len(f.GetFields())+1)
	for i, x := range f.GetFields() {
		rows = append(rows, builderRow{I: i, Field: x})
	}
	if len(f.GetFields()) < form.MaxFields {
		rows = append(rows, builderRow{I: len(f.GetFields()), Field: &parleyv1.FormField{Type: form.Text}, New: true})
	}
	return rows
}

func rowKey(i int, k string) string { return fmt.Sprintf("field.%d.%s", i, k) }

func rowID(i int, k string) string { return fmt.Sprintf("field-%d-%s", i, k) }

func rowTestID(isNew bool) string {
	if isNew {
		return "new-field-row"
	}
	return "field-row"
}

func newFieldHint(isNew bool) string {
	if isNew {
		return "new field"
	}
	return ""
}

// optionLines are a field's options, one per line.
func optionLines(f *parleyv1.FormField) string { return strings.Join(f.GetOptions(), "\n") }

// fieldHeading is a column's heading: the field's label, else its name.
func fieldHeading(f *parleyv1.FormField) string {
	if f.GetLabel() != "" {
		return f.GetLabel()
	}
	return f.GetName()
}
