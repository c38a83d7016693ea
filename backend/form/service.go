package form

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/origin"
	"github.com/parleyhq/parley/backend/page"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/backend/reqinfo"
	"github.com/parleyhq/parley/backend/webhook"
)

// Page sizes of the listings.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
	// exportPage is how many submissions an export reads at a time.
	exportPage = 500
)

// Service is forms and their submissions. Its management methods act for
// the principal in the context (an API key admitted by access, or a
// console member); Form and Submit also serve callers without one.
// Requests were validated by the schema (protovalidate).
type Service struct {
	Store *db.Store
	// Gate counts callers without a key on the form owner's plan.
	Gate *auth.Gate
	// Hooks sends form.submitted to the organization's webhooks.
	Hooks *webhook.Emitter
}

// Caller is who calls a public method, as the transport sees it.
type Caller struct {
	// ClientIP is the client's address, for the per-IP limits of callers
	// without a key.
	ClientIP string
}

// CreateForm creates a form in the principal's organization.
func (s *Service) CreateForm(ctx context.Context, req *parleyv1.CreateFormRequest) (*parleyv1.CreateFormResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	name, err := formName(req.GetName())
	if err != nil {
		return nil, err
	}
	fields, err := storedFields(req.GetFields())
	if err != nil {
		return nil, err
	}
	origins, err := origin.CheckList(req.GetAllowedOrigins())
	if err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	var out *parleyv1.Form
	// SECURITY: written in the principal's organization only.
	err = s.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		f, err := q.CreateForm(ctx, dbq.CreateFormParams{
			OrgID: p.OrgID, ID: id, Name: name, Description: req.GetDescription(),
			Fields: fields, Published: req.GetPublished(), SuccessMessage: req.GetSuccessMessage(),
			AllowedOrigins: origins,
		})
		if err != nil {
			return err
		}
		out, err = toProto(f, 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.CreateFormResponse{Form: out}, nil
}

// formName is a form's name as stored: trimmed. The schema's not-blank
// rule reads \S as RE2 does, ASCII only, so a name of a vertical tab or a
// no-break space passes it and trims to nothing: Invalid.
func formName(s string) (string, error) {
	name := strings.TrimSpace(s)
	if name == "" {
		return "", apperr.InvalidField("name", "must not be blank")
	}
	return name, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// storedFields checks fields beyond the schema (Compile) and returns them
// as stored.
func storedFields(fields []*parleyv1.FormField) ([]byte, error) {
	if _, err := Compile(fields); err != nil {
		return nil, err
	}
	return MarshalFields(fields)
}

// GetForm is Form for callers the access layer admitted with a key: the
// Connect handler serves GetForm with the caller's address instead.
func (s *Service) GetForm(ctx context.Context, req *parleyv1.GetFormRequest) (*parleyv1.GetFormResponse, error) {
	resp, _, err := s.Form(ctx, Caller{}, req)
	return resp, err
}

// Form returns a form. With a principal in ctx: any form of its
// organization, whole (another organization's is Forbidden, an unknown id
// NotFound). Without one: a published form's public view (id, name,
// description, fields, success message), counted on the owner's plan per
// client IP; any other id is NotFound, whoever owns it, and a browser page
// on an origin the form does not list (origin.AdmitForm) is Forbidden. The
// rate state is that of the count, nil with a principal.
func (s *Service) Form(ctx context.Context, c Caller, req *parleyv1.GetFormRequest) (*parleyv1.GetFormResponse, *ratelimit.Result, error) {
	if p, err := auth.FromContext(ctx); err == nil {
		var out *parleyv1.Form
		err := s.withForm(ctx, p, req.GetId(), func(q *dbq.Queries, id uuid.UUID) error {
			f, err := q.GetForm(ctx, dbq.GetFormParams{OrgID: p.OrgID, ID: id})
			if err != nil {
				return err
			}
			out, err = s.detail(ctx, q, f)
			return err
		})
		if err != nil {
			return nil, nil, err
		}
		return &parleyv1.GetFormResponse{Form: out}, nil, nil
	}
	f, lim, err := s.published(ctx, req.GetId())
	if err != nil {
		return nil, nil, err
	}
	// SECURITY: a page on an origin the deployment does not list reads the
	// form only if its owner lists the origin.
	if err := origin.AdmitForm(ctx, f.ID.String(), f.AllowedOrigins); err != nil {
		return nil, nil, err
	}
	reqinfo.SetCaller(ctx, f.OrgID, uuid.Nil)
	rate, err := s.Gate.AdmitVisitor(ctx, f.ID, "", c.ClientIP, "", lim)
	if err != nil {
		return nil, rate, err
	}
	out, err := toProto(f, 0)
	if err != nil {
		return nil, rate, err
	}
	return &parleyv1.GetFormResponse{Form: Public(out)}, rate, nil
}

// Public is the part of a form shown to callers without a key.
func Public(f *parleyv1.Form) *parleyv1.Form {
	return &parleyv1.Form{
		Id: f.GetId(), Name: f.GetName(), Description: f.GetDescription(), Fields: f.GetFields(),
		Published: true, SuccessMessage: f.GetSuccessMessage(),
	}
}

// published reads a published form by id without knowing its
// organization, with the organization's plan limits. Anything else is
// NotFound: an unpublished form, another's or none at all look the same.
func (s *Service) published(ctx context.Context, rawID string) (dbq.Form, plan.Limits, error) {
	id, err := uuid.Parse(rawID)
	if err != nil {
		return dbq.Form{}, plan.Limits{}, notFound(rawID)
	}
	var row dbq.GetPublicFormRow
	// SECURITY: the public_form policy shows the row only if the form is
	// published.
	err = s.Store.PublicForm(ctx, id, func(q *dbq.Queries) error {
		var err error
		row, err = q.GetPublicForm(ctx, id)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !row.Published) {
		return dbq.Form{}, plan.Limits{}, notFound(rawID)
	}
	if err != nil {
		return dbq.Form{}, plan.Limits{}, err
	}
	f := dbq.Form{
		OrgID: row.OrgID, ID: row.ID, Name: row.Name, Description: row.Description, Fields: row.Fields,
		Published: row.Published, SuccessMessage: row.SuccessMessage, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
		AllowedOrigins: row.AllowedOrigins,
	}
	return f, plan.Limits{PerMinute: int64(row.OrgRequestsPerMinute), PerDay: int64(row.OrgRequestsPerDay)}, nil
}

// ListForms lists the principal's organization's forms, newest first, by
// cursor.
func (s *Service) ListForms(ctx context.Context, req *parleyv1.ListFormsRequest) (*parleyv1.ListFormsResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	limit := page.Size(req.GetLimit(), DefaultPageSize, MaxPageSize)
	params := dbq.ListFormsParams{OrgID: p.OrgID, MaxRows: limit + 1}
	if params.BeforeTime, params.BeforeID, err = page.After(req.GetCursor()); err != nil {
		return nil, err
	}
	out := &parleyv1.ListFormsResponse{Forms: []*parleyv1.Form{}}
	// SECURITY: the principal's organization, by tenant transaction and an
	// explicit org_id filter.
	err = s.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
		rows, err := q.ListForms(ctx, params)
		if err != nil {
			return err
		}
		rows, out.NextCursor = page.Cut(rows, limit, func(r dbq.Form) (time.Time, string) { return r.CreatedAt, r.ID.String() })
		ids := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		counts, err := q.CountFormSubmissions(ctx, dbq.CountFormSubmissionsParams{OrgID: p.OrgID, FormIds: ids})
		if err != nil {
			return err
		}
		n := make(map[uuid.UUID]int64, len(counts))
		for _, c := range counts {
			n[c.FormID] = c.Submissions
		}
		for _, r := range rows {
			f, err := toProto(r, n[r.ID])
			if err != nil {
				return err
			}
			out.Forms = append(out.Forms, f)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// UpdateForm changes what update_mask names.
func (s *Service) UpdateForm(ctx context.Context, req *parleyv1.UpdateFormRequest) (*parleyv1.UpdateFormResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	params := dbq.UpdateFormParams{OrgID: p.OrgID}
	for _, path := range req.GetUpdateMask().GetPaths() {
		// A path named in the mask must have its value in the request: a
		// mask of "name" with no name would otherwise blank the name.
		missing := false
		switch path {
		case "name":
			missing = req.Name == nil
			if !missing {
				name, err := formName(req.GetName())
				if err != nil {
					return nil, err
				}
				params.Name = &name
			}
		case "description":
			missing, params.Description = req.Description == nil, req.Description
		case "fields":
			if params.Fields, err = storedFields(req.GetFields()); err != nil {
				return nil, err
			}
		case "published":
			missing, params.Published = req.Published == nil, req.Published
		case "success_message":
			missing, params.SuccessMessage = req.SuccessMessage == nil, req.SuccessMessage
		case "allowed_origins": // an empty list is a value: it clears them
			if params.AllowedOrigins, err = origin.CheckList(req.GetAllowedOrigins()); err != nil {
				return nil, err
			}
		default:
			return nil, apperr.InvalidField("update_mask", "unknown path %q", path)
		}
		if missing {
			return nil, apperr.InvalidField(path, "named in update_mask but not given")
		}
	}
	var out *parleyv1.Form
	err = s.withForm(ctx, p, req.GetId(), func(q *dbq.Queries, id uuid.UUID) error {
		params.ID = id
		f, err := q.UpdateForm(ctx, params)
		if err != nil {
			return err
		}
		out, err = s.detail(ctx, q, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.UpdateFormResponse{Form: out}, nil
}

// DeleteForm removes a form, its submissions and the form.submitted
// webhook deliveries that carried them.
func (s *Service) DeleteForm(ctx context.Context, req *parleyv1.DeleteFormRequest) (*parleyv1.DeleteFormResponse, error) {
	// Its submissions go with it, however many it holds.
	ctx, cancel := context.WithTimeout(ctx, db.DeleteTimeout)
	defer cancel()
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	err = s.withForm(ctx, p, req.GetId(), func(q *dbq.Queries, id uuid.UUID) error {
		n, err := q.DeleteForm(ctx, dbq.DeleteFormParams{OrgID: p.OrgID, ID: id})
		if err == nil && n == 0 {
			return pgx.ErrNoRows
		}
		if err != nil {
			return err
		}
		return deleteDeliveries(ctx, q, p.OrgID, id, nil)
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.DeleteFormResponse{}, nil
}

// deleteDeliveries deletes the form.submitted webhook deliveries that
// carried form's submissions, or submission alone (nil: all of them): their
// bodies hold the values, and a pending one is never sent. The endpoints
// are locked first, as an endpoint's deletion takes them before its
// cascade to their deliveries.
func deleteDeliveries(ctx context.Context, q *dbq.Queries, org, form uuid.UUID, submission *uuid.UUID) error {
	if err := q.LockWebhooksForForget(ctx, org); err != nil {
		return err
	}
	var sid *string
	if submission != nil {
		s := submission.String()
		sid = &s
	}
	// Locked, then deleted in a statement of its own: the copies that
	// replays of them commit meanwhile are deleted too.
	if err := q.LockSubmissionDeliveries(ctx, dbq.LockSubmissionDeliveriesParams{OrgID: org, FormID: form.String(), SubmissionID: sid}); err != nil {
		return err
	}
	_, err := q.DeleteSubmissionDeliveries(ctx, dbq.DeleteSubmissionDeliveriesParams{OrgID: org, FormID: form.String(), SubmissionID: sid})
	return err
}

// DeleteSubmission removes one of a form's submissions: a visitor's
// values go without the form's other submissions (a contact's deletion
// leaves them), with the form.submitted webhook deliveries that carried
// them. Another organization's form is Forbidden; a submission the
// form does not hold NotFound.
func (s *Service) DeleteSubmission(ctx context.Context, req *parleyv1.DeleteSubmissionRequest) (*parleyv1.DeleteSubmissionResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	err = s.withForm(ctx, p, req.GetFormId(), func(q *dbq.Queries, id uuid.UUID) error {
		if _, err := q.GetForm(ctx, dbq.GetFormParams{OrgID: p.OrgID, ID: id}); err != nil {
			return err
		}
		gone := apperr.New(apperr.NotFound, "submission %q not found in form %q", req.GetId(), req.GetFormId())
		sid, err := uuid.Parse(req.GetId())
		if err != nil {
			return gone
		}
		n, err := q.DeleteSubmission(ctx, dbq.DeleteSubmissionParams{OrgID: p.OrgID, FormID: id, ID: sid})
		if err != nil {
			return err
		}
		if n == 0 {
			return gone
		}
		// The form.submitted deliveries that carried its values go with it.
		return deleteDeliveries(ctx, q, p.OrgID, id, &sid)
	})
	if err != nil {
		return nil, err
	}
	return &parleyv1.DeleteSubmissionResponse{}, nil
}

// SubmitForm is Submit for callers the access layer admitted with a key:
// the Connect handler serves SubmitForm with the caller's address instead.
func (s *Service) SubmitForm(ctx context.Context, req *parleyv1.SubmitFormRequest) (*parleyv1.SubmitFormResponse, error) {
	resp, _, err := s.Submit(ctx, Caller{}, req)
	return resp, err
}

// Submit checks a submission's values against its form and stores them.
// With a principal in ctx: any form of its organization (another's is
// Forbidden). Without one: a published form (NotFound otherwise) from an
// origin it accepts (origin.AdmitForm; Forbidden otherwise, nothing
// stored), with a visitor id; the call counts on the owner's plan per visitor and per
// client IP before anything is checked. A value at fault is Invalid with
// the field values.<name> (Schema.Decode).
func (s *Service) Submit(ctx context.Context, c Caller, req *parleyv1.SubmitFormRequest) (*parleyv1.SubmitFormResponse, *ratelimit.Result, error) {
	var (
		org  uuid.UUID
		form uuid.UUID
		rate *ratelimit.Result
	)
	p, perr := auth.FromContext(ctx)
	if perr == nil {
		org = p.OrgID
		id, err := uuid.Parse(req.GetFormId())
		if err != nil {
			return nil, nil, notFound(req.GetFormId())
		}
		form = id
	} else {
		f, lim, err := s.published(ctx, req.GetFormId())
		if err != nil {
			return nil, nil, err
		}
		// SECURITY: a page on an origin the deployment does not list
		// submits the form only if its owner lists the origin.
		if err := origin.AdmitForm(ctx, f.ID.String(), f.AllowedOrigins); err != nil {
			return nil, nil, err
		}
		if req.GetVisitorId() == "" {
			return nil, nil, apperr.InvalidField("visitor_id", "required without an API key")
		}
		reqinfo.SetCaller(ctx, f.OrgID, uuid.Nil)
		if rate, err = s.Gate.AdmitVisitor(ctx, f.ID, req.GetVisitorId(), c.ClientIP, "", lim); err != nil {
			return nil, rate, err
		}
		org, form = f.OrgID, f.ID
	}
	out := &parleyv1.SubmitFormResponse{}
	// SECURITY: the form is read again, and the submission written, in its
	// organization's tenant transaction: the principal's, or the one the
	// database named for a published form.
	err := s.Store.TenantTx(ctx, org, func(tx pgx.Tx, q *dbq.Queries) error {
		f, err := q.GetFormForSubmission(ctx, dbq.GetFormForSubmissionParams{OrgID: org, ID: form})
		if errors.Is(err, pgx.ErrNoRows) {
			if p == nil {
				return notFound(req.GetFormId()) // deleted meanwhile
			}
			return db.Missing(ctx, q, "form", "form", form)
		}
		if err != nil {
			return err
		}
		if p == nil && !f.Published {
			return notFound(req.GetFormId()) // unpublished meanwhile
		}
		schema, err := StoredSchema(f.Fields)
		if err != nil {
			return err
		}
		values, err := schema.Decode(req.GetValues())
		if err != nil {
			return err
		}
		data, err := values.JSON()
		if err != nil {
			return err
		}
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		sub, err := q.CreateSubmission(ctx, dbq.CreateSubmissionParams{
			OrgID: org, ID: id, FormID: form, Data: data,
			VisitorID: req.GetVisitorId(), ConversationID: req.GetConversationId(),
		})
		if err != nil {
			return err
		}
		out.Id, out.SuccessMessage = sub.ID.String(), f.SuccessMessage
		// The event commits with the submission, or neither does.
		return s.Hooks.Emit(ctx, tx, org, webhook.FormSubmitted, func() (proto.Message, error) { return submissionProto(sub) })
	})
	if err != nil {
		return nil, rate, err
	}
	return out, rate, nil
}

// ListSubmissions lists a form's submissions, newest first, by cursor.
func (s *Service) ListSubmissions(ctx context.Context, req *parleyv1.ListSubmissionsRequest) (*parleyv1.ListSubmissionsResponse, error) {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return nil, err
	}
	limit := page.Size(req.GetLimit(), DefaultPageSize, MaxPageSize)
	params := dbq.ListSubmissionsParams{OrgID: p.OrgID, MaxRows: limit + 1}
	if params.BeforeTime, params.BeforeID, err = page.After(req.GetCursor()); err != nil {
		return nil, err
	}
	out := &parleyv1.ListSubmissionsResponse{Submissions: []*parleyv1.Submission{}}
	err = s.withForm(ctx, p, req.GetFormId(), func(q *dbq.Queries, id uuid.UUID) error {
		if _, err := q.GetForm(ctx, dbq.GetFormParams{OrgID: p.OrgID, ID: id}); err != nil {
			return err
		}
		params.FormID = id
		rows, err := q.ListSubmissions(ctx, params)
		if err != nil {
			return err
		}
		rows, out.NextCursor = page.Cut(rows, limit, func(r dbq.FormSubmission) (time.Time, string) { return r.CreatedAt, r.ID.String() })
		for _, r := range rows {
			sub, err := submissionProto(r)
			if err != nil {
				return err
			}
			out.Submissions = append(out.Submissions, sub)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ExportCSV writes every submission of one of the principal's forms as CSV
// (NewCSV), newest first. start is called with the form's id once the form
// is found, before the first byte, and returns where to write; until then
// an error is the caller's to report (NotFound, Forbidden). After it, an
// error means the export was cut short.
func (s *Service) ExportCSV(ctx context.Context, formID string, start func(id string) io.Writer) error {
	p, err := auth.FromContext(ctx)
	if err != nil {
		return err
	}
	var form dbq.Form
	err = s.withForm(ctx, p, formID, func(q *dbq.Queries, id uuid.UUID) error {
		form, err = q.GetForm(ctx, dbq.GetFormParams{OrgID: p.OrgID, ID: id})
		return err
	})
	if err != nil {
		return err
	}
	fields, err := UnmarshalFields(form.Fields)
	if err != nil {
		return err
	}
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.GetName()
	}
	out, err := NewCSV(start(form.ID.String()), names)
	if err != nil {
		return err
	}
	params := dbq.ListSubmissionsParams{OrgID: p.OrgID, FormID: form.ID, MaxRows: exportPage}
	for {
		var rows []dbq.FormSubmission
		// SECURITY: each page is read in the principal's organization.
		err := s.Store.Tenant(ctx, p.OrgID, func(q *dbq.Queries) error {
			var err error
			rows, err = q.ListSubmissions(ctx, params)
			return err
		})
		if err != nil {
			return err
		}
		for _, r := range rows {
			if err := out.Row(r.Data, r.CreatedAt, r.ID.String()); err != nil {
				return err
			}
		}
		if err := out.Flush(); err != nil {
			return err
		}
		if len(rows) < exportPage {
			return nil
		}
		last := rows[len(rows)-1]
		params.BeforeTime, params.BeforeID = ptr(last.CreatedAt), ptr(last.ID)
	}
}

// ServeCSV answers an HTTP request with ExportCSV's spreadsheet of formID
// as an attachment. An error is returned only while nothing was sent (the
// caller answers it). One after the status went out aborts the response
// (http.ErrAbortHandler): the client sees a broken download, never a
// shorter file that looks complete.
func (s *Service) ServeCSV(w http.ResponseWriter, r *http.Request, formID string) error {
	started := false
	err := s.ExportCSV(r.Context(), formID, func(id string) io.Writer {
		started = true
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="form-`+id+`-submissions.csv"`)
		w.WriteHeader(http.StatusOK)
		return w
	})
	if err != nil && started {
		if r.Context().Err() == nil {
			slog.ErrorContext(r.Context(), "form export cut short", "err", err, "form", formID)
		}
		panic(http.ErrAbortHandler)
	}
	return err
}

// withForm runs fn in the principal's tenant transaction for the form id.
// When fn finds no row, the id is NotFound, or Forbidden if it is another
// organization's form (db.Missing).
func (s *Service) withForm(ctx context.Context, p *auth.Principal, rawID string, fn func(q *dbq.Queries, id uuid.UUID) error) error {
	// SECURITY: the principal's organization, by tenant transaction; fn's
	// queries name it too.
	return s.Store.TenantRow(ctx, p.OrgID, "form", "form", rawID, func(_ pgx.Tx, q *dbq.Queries, id uuid.UUID) error {
		return fn(q, id)
	})
}

func notFound(id string) error {
	return apperr.New(apperr.NotFound, "form %q not found", id)
}

// detail is a form with its submission count.
func (s *Service) detail(ctx context.Context, q *dbq.Queries, f dbq.Form) (*parleyv1.Form, error) {
	counts, err := q.CountFormSubmissions(ctx, dbq.CountFormSubmissionsParams{OrgID: f.OrgID, FormIds: []uuid.UUID{f.ID}})
	if err != nil {
		return nil, err
	}
	var n int64
	if len(counts) > 0 {
		n = counts[0].Submissions
	}
	return toProto(f, n)
}

func toProto(f dbq.Form, submissions int64) (*parleyv1.Form, error) {
	fields, err := UnmarshalFields(f.Fields)
	if err != nil {
		return nil, err
	}
	return &parleyv1.Form{
		Id: f.ID.String(), Name: f.Name, Description: f.Description, Fields: fields, Published: f.Published,
		SuccessMessage: f.SuccessMessage, CreateTime: timestamppb.New(f.CreatedAt), UpdateTime: timestamppb.New(f.UpdatedAt),
		SubmissionCount: submissions, AllowedOrigins: nonNil(f.AllowedOrigins),
	}, nil
}

func submissionProto(r dbq.FormSubmission) (*parleyv1.Submission, error) {
	values := &structpb.Struct{}
	if err := values.UnmarshalJSON(r.Data); err != nil {
		return nil, err
	}
	return &parleyv1.Submission{
		Id: r.ID.String(), FormId: r.FormID.String(), Values: values, VisitorId: r.VisitorID,
		ConversationId: r.ConversationID, CreateTime: timestamppb.New(r.CreatedAt),
	}, nil
}

func ptr[T any](v T) *T { return &v }
