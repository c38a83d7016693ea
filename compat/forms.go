package compat

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/form"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/compat/wire"
)

// WithForms adds the form paths.
func (h *Handler) WithForms(s *form.Service) *Handler {
	h.forms = s
	return h
}

// fieldBody is a form field as REST clients write it.
type fieldBody struct {
	Name     *string  `json:"name"`
	Label    *string  `json:"label"`
	Type     *string  `json:"type"`
	Required *bool    `json:"required"`
	Options  []string `json:"options"`
	Min      *float64 `json:"min"`
	Max      *float64 `json:"max"`
	Pattern  *string  `json:"pattern"`
}

// formBody is a form as REST clients write it; absent keys are nil.
type formBody struct {
	Name           *string      `json:"name"`
	Description    *string      `json:"description"`
	Fields         *[]fieldBody `json:"fields"`
	Published      *bool        `json:"published"`
	SuccessMessage *string      `json:"successMessage"`
	AllowedOrigins *[]string    `json:"allowedOrigins"`
}

func (b *formBody) origins() []string {
	if b.AllowedOrigins == nil {
		return nil
	}
	return *b.AllowedOrigins
}

func (b *formBody) fields() []*parleyv1.FormField {
	if b.Fields == nil {
		return nil
	}
	out := make([]*parleyv1.FormField, 0, len(*b.Fields))
	for _, f := range *b.Fields {
		out = append(out, &parleyv1.FormField{
			Name: deref(f.Name), Label: deref(f.Label), Type: deref(f.Type), Required: f.Required != nil && *f.Required,
			Options: f.Options, Min: f.Min, Max: f.Max, Pattern: deref(f.Pattern),
		})
	}
	return out
}

func readForm(w http.ResponseWriter, r *http.Request) (*formBody, error) {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return nil, err
	}
	var b formBody
	if err := wire.DecodeStrict(body, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

func fieldJSON(f *parleyv1.FormField) map[string]any {
	out := map[string]any{"name": f.GetName(), "label": f.GetLabel(), "type": f.GetType(), "required": f.GetRequired()}
	if len(f.GetOptions()) > 0 {
		out["options"] = f.GetOptions()
	}
	if f.Min != nil {
		out["min"] = f.GetMin()
	}
	if f.Max != nil {
		out["max"] = f.GetMax()
	}
	if f.GetPattern() != "" {
		out["pattern"] = f.GetPattern()
	}
	return out
}

func fieldsJSON(f *parleyv1.Form) []map[string]any {
	out := make([]map[string]any, 0, len(f.GetFields()))
	for _, x := range f.GetFields() {
		out = append(out, fieldJSON(x))
	}
	return out
}

func formJSON(f *parleyv1.Form) map[string]any {
	return map[string]any{
		"id": f.GetId(), "name": f.GetName(), "description": f.GetDescription(), "fields": fieldsJSON(f),
		"published": f.GetPublished(), "successMessage": f.GetSuccessMessage(),
		"submissionCount": f.GetSubmissionCount(), "createdAt": ts(f.GetCreateTime()), "updatedAt": ts(f.GetUpdateTime()),
		"allowedOrigins": nonNil(f.GetAllowedOrigins()),
	}
}

// publicFormJSON is what a caller without a key sees of a published form.
func publicFormJSON(f *parleyv1.Form) map[string]any {
	return map[string]any{
		"id": f.GetId(), "name": f.GetName(), "description": f.GetDescription(), "fields": fieldsJSON(f),
		"successMessage": f.GetSuccessMessage(),
	}
}

func submissionJSON(s *parleyv1.Submission) map[string]any {
	values := s.GetValues().AsMap()
	return map[string]any{
		"id": s.GetId(), "formId": s.GetFormId(), "values": values, "visitorId": s.GetVisitorId(),
		"conversationId": s.GetConversationId(), "createdAt": ts(s.GetCreateTime()),
	}
}

// nextCursor is a listing's nextCursor: null on the last page, as the
// other cursor listings say it.
func nextCursor(c string) any {
	if c == "" {
		return nil
	}
	return c
}

// pageQuery reads ?limit= and ?cursor=.
func pageQuery(r *http.Request) (int32, string, error) {
	q := r.URL.Query()
	var limit int32
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return 0, "", apperr.InvalidField("limit", "must be a whole number")
		}
		limit = int32(n)
	}
	return limit, q.Get("cursor"), nil
}

// createForm is POST /api/forms.
func (h *Handler) createForm(w http.ResponseWriter, r *http.Request) error {
	b, err := readForm(w, r)
	if err != nil {
		return err
	}
	req := &parleyv1.CreateFormRequest{
		Name: deref(b.Name), Description: deref(b.Description), Fields: b.fields(),
		Published: b.Published != nil && *b.Published, SuccessMessage: deref(b.SuccessMessage),
		AllowedOrigins: b.origins(),
	}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, err := h.forms.CreateForm(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/forms/"+resp.GetForm().GetId())
	writeJSON(w, http.StatusCreated, formJSON(resp.GetForm()))
	return nil
}

// listForms is GET /api/forms.
func (h *Handler) listForms(w http.ResponseWriter, r *http.Request) error {
	limit, cursor, err := pageQuery(r)
	if err != nil {
		return err
	}
	return respond(h, w, r, &parleyv1.ListFormsRequest{Limit: limit, Cursor: cursor}, h.forms.ListForms, http.StatusOK,
		func(resp *parleyv1.ListFormsResponse) any {
			items := []map[string]any{}
			for _, f := range resp.GetForms() {
				items = append(items, formJSON(f))
			}
			return map[string]any{"forms": items, "nextCursor": nextCursor(resp.GetNextCursor())}
		})
}

// getForm is GET /api/forms/{formId}: with a key, any form of its
// organization; without one, a published form's public view.
func (h *Handler) getForm(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.GetFormRequest{Id: r.PathValue("formId")}
	if err := h.validate(req); err != nil {
		return err
	}
	resp, rate, err := h.forms.Form(r.Context(), form.Caller{ClientIP: clientIP(r)}, req)
	ratelimit.WriteHeaders(w.Header(), rate, time.Now())
	if err != nil {
		return err
	}
	if r.Header.Get("Authorization") == "" {
		writeJSON(w, http.StatusOK, publicFormJSON(resp.GetForm()))
		return nil
	}
	writeJSON(w, http.StatusOK, formJSON(resp.GetForm()))
	return nil
}

// updateForm is PUT /api/forms/{formId}: the keys given are changed.
func (h *Handler) updateForm(w http.ResponseWriter, r *http.Request) error {
	b, err := readForm(w, r)
	if err != nil {
		return err
	}
	req := &parleyv1.UpdateFormRequest{
		Id: r.PathValue("formId"), UpdateMask: &fieldmaskpb.FieldMask{}, Name: b.Name, Description: b.Description,
		Fields: b.fields(), Published: b.Published, SuccessMessage: b.SuccessMessage,
		AllowedOrigins: b.origins(),
	}
	for path, set := range map[string]bool{
		"name": b.Name != nil, "description": b.Description != nil, "fields": b.Fields != nil,
		"published": b.Published != nil, "success_message": b.SuccessMessage != nil,
		"allowed_origins": b.AllowedOrigins != nil,
	} {
		if set {
			req.UpdateMask.Paths = append(req.UpdateMask.Paths, path)
		}
	}
	if len(req.UpdateMask.Paths) == 0 {
		return apperr.InvalidField("body", "nothing to change: send name, description, fields, published, successMessage or allowedOrigins")
	}
	return respond(h, w, r, req, h.forms.UpdateForm, http.StatusOK,
		func(resp *parleyv1.UpdateFormResponse) any { return formJSON(resp.GetForm()) })
}

// deleteForm is DELETE /api/forms/{formId}.
func (h *Handler) deleteForm(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.DeleteFormRequest{Id: r.PathValue("formId")}
	return respond(h, w, r, req, h.forms.DeleteForm, http.StatusOK,
		func(*parleyv1.DeleteFormResponse) any { return map[string]any{"id": req.GetId(), "deleted": true} })
}

// deleteSubmission is DELETE /api/forms/{formId}/submissions/{submissionId}.
func (h *Handler) deleteSubmission(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.DeleteSubmissionRequest{FormId: r.PathValue("formId"), Id: r.PathValue("submissionId")}
	return respond(h, w, r, req, h.forms.DeleteSubmission, http.StatusOK,
		func(*parleyv1.DeleteSubmissionResponse) any {
			return map[string]any{"id": req.GetId(), "deleted": true}
		})
}

// submitForm is POST /api/forms/{formId}: {"values": {...}, "visitorId",
// "conversationId"} → 201 {id, successMessage}.
func (h *Handler) submitForm(w http.ResponseWriter, r *http.Request) error {
	req, err := decodeSubmission(w, r)
	if err == nil {
		err = h.validate(req)
	}
	var resp *parleyv1.SubmitFormResponse
	if err == nil {
		var rate *ratelimit.Result
		resp, rate, err = h.forms.Submit(r.Context(), form.Caller{ClientIP: clientIP(r)}, req)
		ratelimit.WriteHeaders(w.Header(), rate, time.Now())
	}
	if err != nil {
		var e *apperr.Error
		if errors.As(err, &e) && e.Code == apperr.Invalid && strings.HasPrefix(e.Field, "values.") {
			// A value's field keeps the name its form gives it (first_name),
			// where other fields are named as JSON names them.
			m := apperr.Lookup(apperr.Invalid)
			writeJSON(w, m.HTTPStatus, errorBody{Error: errorDetail{Code: m.SpecCode, Message: e.Message, Field: e.Field}})
			return nil
		}
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"id": resp.GetId(), "successMessage": resp.GetSuccessMessage()})
	return nil
}

// decodeSubmission reads a submission's body into the request.
func decodeSubmission(w http.ResponseWriter, r *http.Request) (*parleyv1.SubmitFormRequest, error) {
	body, err := wire.ReadBody(w, r)
	if err != nil {
		return nil, err
	}
	return DecodeSubmission(r.PathValue("formId"), body)
}

// DecodeSubmission decodes a submission's REST body for form formID:
// values must be a JSON object (of any JSON values: the form's fields
// check them), visitorId and conversationId strings; nothing else.
func DecodeSubmission(formID string, body []byte) (*parleyv1.SubmitFormRequest, error) {
	var b struct {
		Values         json.RawMessage `json:"values"`
		VisitorID      *string         `json:"visitorId"`
		ConversationID *string         `json:"conversationId"`
	}
	if err := wire.DecodeStrict(body, &b); err != nil {
		return nil, err
	}
	req := &parleyv1.SubmitFormRequest{FormId: formID, VisitorId: deref(b.VisitorID), ConversationId: deref(b.ConversationID)}
	if len(b.Values) == 0 || string(b.Values) == "null" {
		return req, nil
	}
	values := &structpb.Struct{}
	if err := protojson.Unmarshal(b.Values, values); err != nil {
		// Name the value at fault when values is an object (a number
		// past float64's range, 1e400, is refused by protojson alone).
		var each map[string]json.RawMessage
		if json.Unmarshal(b.Values, &each) != nil {
			return nil, apperr.InvalidField("values", "must be a JSON object of the form's field names and values")
		}
		for _, name := range slices.Sorted(maps.Keys(each)) {
			if protojson.Unmarshal(each[name], &structpb.Value{}) != nil {
				return nil, apperr.InvalidField("values."+name, "is not a value a form takes (a number out of range?)")
			}
		}
		return nil, apperr.InvalidField("values", "must be a JSON object of the form's field names and values")
	}
	req.Values = values.GetFields()
	return req, nil
}

// listSubmissions is GET /api/forms/{formId}/submissions: JSON pages, or
// with ?format=csv every submission as a spreadsheet.
func (h *Handler) listSubmissions(w http.ResponseWriter, r *http.Request) error {
	switch r.URL.Query().Get("format") {
	case "", "json":
	case "csv":
		req := &parleyv1.GetFormRequest{Id: r.PathValue("formId")}
		if err := h.validate(req); err != nil {
			return err
		}
		return h.forms.ServeCSV(w, r, req.GetId())
	default:
		return apperr.InvalidField("format", "csv or json")
	}
	limit, cursor, err := pageQuery(r)
	if err != nil {
		return err
	}
	req := &parleyv1.ListSubmissionsRequest{FormId: r.PathValue("formId"), Limit: limit, Cursor: cursor}
	return respond(h, w, r, req, h.forms.ListSubmissions, http.StatusOK,
		func(resp *parleyv1.ListSubmissionsResponse) any {
			items := []map[string]any{}
			for _, s := range resp.GetSubmissions() {
				items = append(items, submissionJSON(s))
			}
			return map[string]any{"submissions": items, "nextCursor": nextCursor(resp.GetNextCursor())}
		})
}
