package form_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	validatepb "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"

	"github.com/parleyhq/parley/backend/form"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

var ctx = context.Background()

func client(e *testenv.Env, key string, opts ...connect.ClientOption) parleyv1connect.FormServiceClient {
	hc := http.DefaultClient
	for _, o := range opts {
		if o == grpcOpt {
			hc = testenv.H2C()
		}
	}
	if key != "" {
		opts = append(opts, connect.WithInterceptors(testenv.Bearer(key)))
	}
	return parleyv1connect.NewFormServiceClient(hc, e.URL, opts...)
}

var grpcOpt = connect.WithGRPC()

func contactForm() *parleyv1.CreateFormRequest {
	return &parleyv1.CreateFormRequest{
		Name: "Contact us", Description: "We answer within a day.", SuccessMessage: "Thanks!",
		Fields: []*parleyv1.FormField{
			{Name: "first_name", Label: "First name", Type: form.Text, Required: true, Max: f64(100)},
			{Name: "email", Label: "Email", Type: form.Email, Required: true},
			{Name: "phone", Type: form.Phone},
			{Name: "topic", Type: form.Select, Options: []string{"sales", "support"}},
			{Name: "consent", Type: form.Checkbox, Required: true},
		},
	}
}

func code(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return 0
}

// badField is the field a Connect error names: a BadRequest violation (the
// service's checks) or a protovalidate one (the schema's).
func badField(t *testing.T, err error) string {
	t.Helper()
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		switch x := v.(type) {
		case *errdetails.BadRequest:
			return x.GetFieldViolations()[0].GetField()
		case *validatepb.Violations:
			return protovalidate.FieldPathString(x.GetViolations()[0].GetField())
		}
	}
	t.Fatalf("no field in %v", err)
	return ""
}

func values(t *testing.T, m map[string]any) map[string]*structpb.Value {
	t.Helper()
	s, err := structpb.NewStruct(m)
	require.NoError(t, err)
	return s.GetFields()
}

// The whole life of a form over Connect, gRPC-Web and gRPC: create, read,
// list, update, submit, list submissions, delete.
func TestFormsOverRPCProtocols(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	for _, p := range []struct {
		name string
		opts []connect.ClientOption
	}{
		{"connect", nil},
		{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
		{"grpc", []connect.ClientOption{grpcOpt}},
	} {
		t.Run(p.name, func(t *testing.T) {
			c := client(e, e.A.Key, p.opts...)
			created, err := c.CreateForm(ctx, contactForm())
			require.NoError(t, err)
			f := created.GetForm()
			require.NotEmpty(t, f.GetId())
			require.False(t, f.GetPublished())
			require.Len(t, f.GetFields(), 5)
			require.Equal(t, 100.0, f.GetFields()[0].GetMax())

			got, err := c.GetForm(ctx, &parleyv1.GetFormRequest{Id: f.GetId()})
			require.NoError(t, err)
			require.Equal(t, "We answer within a day.", got.GetForm().GetDescription())
			require.NotNil(t, got.GetForm().GetCreateTime(), "a key reads the whole form")

			list, err := c.ListForms(ctx, &parleyv1.ListFormsRequest{})
			require.NoError(t, err)
			var listed []string
			for _, x := range list.GetForms() {
				listed = append(listed, x.GetId())
			}
			require.Contains(t, listed, f.GetId())

			sub, err := c.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: f.GetId(), Values: values(t, map[string]any{
				"first_name": "Ada", "email": "ada@example.com", "phone": "+44 20 7946 0958", "consent": true,
			})})
			require.NoError(t, err, "a key submits to an unpublished form")
			require.Equal(t, "Thanks!", sub.GetSuccessMessage())

			_, err = c.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: f.GetId(), Values: values(t, map[string]any{
				"first_name": "Ada", "email": "not an email", "consent": true,
			})})
			require.Equal(t, connect.CodeInvalidArgument, code(err), "%v", err)
			require.Equal(t, "values.email", badField(t, err))

			subs, err := c.ListSubmissions(ctx, &parleyv1.ListSubmissionsRequest{FormId: f.GetId()})
			require.NoError(t, err)
			require.Len(t, subs.GetSubmissions(), 1)
			require.Equal(t, sub.GetId(), subs.GetSubmissions()[0].GetId())
			require.Equal(t, map[string]any{"first_name": "Ada", "email": "ada@example.com", "phone": "+442079460958", "consent": true},
				subs.GetSubmissions()[0].GetValues().AsMap())

			pub := true
			upd, err := c.UpdateForm(ctx, &parleyv1.UpdateFormRequest{
				Id: f.GetId(), Published: &pub, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"published"}},
			})
			require.NoError(t, err)
			require.True(t, upd.GetForm().GetPublished())
			require.Equal(t, "Contact us", upd.GetForm().GetName(), "a field outside the mask changed")
			require.Len(t, upd.GetForm().GetFields(), 5)
			require.EqualValues(t, 1, upd.GetForm().GetSubmissionCount())

			_, err = c.UpdateForm(ctx, &parleyv1.UpdateFormRequest{
				Id: f.GetId(), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}},
			})
			require.Equal(t, connect.CodeInvalidArgument, code(err), "a masked path without its value")

			_, err = c.DeleteForm(ctx, &parleyv1.DeleteFormRequest{Id: f.GetId()})
			require.NoError(t, err)
			_, err = c.GetForm(ctx, &parleyv1.GetFormRequest{Id: f.GetId()})
			require.Equal(t, connect.CodeNotFound, code(err))
			_, err = c.ListSubmissions(ctx, &parleyv1.ListSubmissionsRequest{FormId: f.GetId()})
			require.Equal(t, connect.CodeNotFound, code(err), "submissions go with their form")
		})
	}
}

// The schema refuses what it can state (types, names, options by type,
// bounds, 50 fields, unique names), and the service what it cannot
// (patterns that do not compile, lengths over a type's cap): each names
// the field at fault.
func TestFormDefinitionsAreChecked(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	c := client(e, e.A.Key)
	many := make([]*parleyv1.FormField, 51)
	for i := range many {
		many[i] = &parleyv1.FormField{Name: fmt.Sprintf("f%d", i), Type: form.Text}
	}
	for _, tc := range []struct {
		name      string
		fields    []*parleyv1.FormField
		wantField string
	}{
		{"unknown type", []*parleyv1.FormField{{Name: "a", Type: "color"}}, "fields[0].type"},
		{"bad name", []*parleyv1.FormField{{Name: "1a", Type: form.Text}}, "fields[0].name"},
		{"name with a space", []*parleyv1.FormField{{Name: "a b", Type: form.Text}}, "fields[0].name"},
		{"duplicate names", []*parleyv1.FormField{{Name: "a", Type: form.Text}, {Name: "a", Type: form.Email}}, "fields"},
		{"51 fields", many, "fields"},
		{"select without options", []*parleyv1.FormField{{Name: "a", Type: form.Select}}, "fields[0]"},
		{"options on text", []*parleyv1.FormField{{Name: "a", Type: form.Text, Options: []string{"x"}}}, "fields[0]"},
		{"duplicate options", []*parleyv1.FormField{{Name: "a", Type: form.Select, Options: []string{"x", "x"}}}, "fields[0].options"},
		{"pattern on a number", []*parleyv1.FormField{{Name: "a", Type: form.Number, Pattern: "1"}}, "fields[0]"},
		{"min on a date", []*parleyv1.FormField{{Name: "a", Type: form.Date, Min: f64(1)}}, "fields[0]"},
		{"min over max", []*parleyv1.FormField{{Name: "a", Type: form.Number, Min: f64(2), Max: f64(1)}}, "fields[0]"},
		{"fractional length", []*parleyv1.FormField{{Name: "a", Type: form.Text, Max: f64(1.5)}}, "fields[0]"},
		{"negative length", []*parleyv1.FormField{{Name: "a", Type: form.Text, Min: f64(-1)}}, "fields[0]"},
		{"pattern too long", []*parleyv1.FormField{{Name: "a", Type: form.Text, Pattern: string(make([]byte, 501))}}, "fields[0].pattern"},
		{"pattern not RE2", []*parleyv1.FormField{{Name: "a", Type: form.Text, Pattern: `(?<=a)b`}}, "fields[0].pattern"},
		{"pattern too complex", []*parleyv1.FormField{{Name: "a", Type: form.Textarea, Pattern: strings.Repeat(`(?:.*){999}`, 40)}}, "fields[0].pattern"},
		{"pattern too complex, counted", []*parleyv1.FormField{{Name: "a", Type: form.Text, Pattern: `[a-z]{1,1000}[0-9]{1,1000}`}}, "fields[0].pattern"},
		{"patterns too complex together", []*parleyv1.FormField{
			{Name: "a", Type: form.Textarea, Pattern: `[A-Z]{2}[0-9]{1,64}`},
			{Name: "b", Type: form.Textarea, Pattern: `[A-Z]{2}[0-9]{1,64}`},
		}, "fields[1].pattern"},
		{"length over the cap", []*parleyv1.FormField{{Name: "a", Type: form.Phone, Max: f64(17)}}, "fields[0].max"},
		// Compiling costs the program's size, whatever max says.
		{"patterns too large together, max 0", slowToCompile(50), "fields[0].pattern"},
		{"pattern too large, max 0", []*parleyv1.FormField{{Name: "a", Type: form.Text, Max: f64(0), Pattern: `(?:` + strings.Repeat("a", 490) + `){1000}`}}, "fields[0].pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := contactForm()
			req.Fields = tc.fields
			_, err := c.CreateForm(ctx, req)
			require.Equal(t, connect.CodeInvalidArgument, code(err), "%v", err)
			require.Equal(t, tc.wantField, badField(t, err))
		})
	}
	// Patterns of usual shape are well within the bound.
	req := contactForm()
	req.Fields = []*parleyv1.FormField{
		{Name: "email", Type: form.Email, Pattern: `[a-z0-9._%+-]{1,64}@[a-z0-9.-]{1,255}\.[a-z]{2,24}`},
		{Name: "code", Type: form.Textarea, Pattern: `[A-Z]{2}[0-9]{1,64}`},
		{Name: "postcode", Type: form.Text, Pattern: `[A-Z]{1,2}[0-9][A-Z0-9]? ?[0-9][A-Z]{2}`},
	}
	_, err := c.CreateForm(ctx, req)
	require.NoError(t, err)
	req = contactForm()
	req.Fields = many[:50]
	_, err = c.CreateForm(ctx, req)
	require.NoError(t, err, "50 fields are allowed")
}

// slowToCompile is n text fields with max 0 and a pattern of 55,000
// instructions each (about 25 ms to compile).
func slowToCompile(n int) []*parleyv1.FormField {
	fields := make([]*parleyv1.FormField, n)
	for i := range fields {
		fields[i] = &parleyv1.FormField{Name: fmt.Sprintf("f%d", i), Type: form.Text, Max: f64(0), Pattern: strings.Repeat(`(.{1000})`, 55)}
	}
	return fields
}

// Without a key: a published form's public view, and submissions with a
// visitor id; anything else is NotFound, whoever owns it.
func TestPublicFormsOverConnect(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	owner := client(e, e.A.Key)
	anon := client(e, "")
	created, err := owner.CreateForm(ctx, contactForm())
	require.NoError(t, err)
	id := created.GetForm().GetId()

	_, err = anon.GetForm(ctx, &parleyv1.GetFormRequest{Id: id})
	require.Equal(t, connect.CodeNotFound, code(err), "an unpublished form is not found without a key")
	_, err = anon.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, VisitorId: "v1"})
	require.Equal(t, connect.CodeNotFound, code(err))
	_, err = anon.ListForms(ctx, &parleyv1.ListFormsRequest{})
	require.Equal(t, connect.CodeUnauthenticated, code(err), "management needs a key")

	pub := true
	_, err = owner.UpdateForm(ctx, &parleyv1.UpdateFormRequest{Id: id, Published: &pub, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"published"}}})
	require.NoError(t, err)

	got, err := anon.GetForm(ctx, &parleyv1.GetFormRequest{Id: id})
	require.NoError(t, err)
	require.Equal(t, "Contact us", got.GetForm().GetName())
	require.Len(t, got.GetForm().GetFields(), 5)
	require.Nil(t, got.GetForm().GetCreateTime(), "the public view holds the fields, not the form's records")
	require.Zero(t, got.GetForm().GetSubmissionCount())

	ok := values(t, map[string]any{"first_name": "Ada", "email": "ada@example.com", "consent": true})
	_, err = anon.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, Values: ok})
	require.Equal(t, connect.CodeInvalidArgument, code(err), "a visitor id is required without a key")
	require.Equal(t, "visitor_id", badField(t, err))
	_, err = anon.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, VisitorId: "v1", Values: values(t, map[string]any{
		"first_name": "Ada", "email": "ada@example.com", "consent": true, "admin": true,
	})})
	require.Equal(t, "values.admin", badField(t, err), "undeclared fields are refused")

	resp, err := anon.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, VisitorId: "v1", ConversationId: "conv-1", Values: ok})
	require.NoError(t, err)
	subs, err := owner.ListSubmissions(ctx, &parleyv1.ListSubmissionsRequest{FormId: id})
	require.NoError(t, err)
	require.Len(t, subs.GetSubmissions(), 1)
	require.Equal(t, resp.GetId(), subs.GetSubmissions()[0].GetId())
	require.Equal(t, "v1", subs.GetSubmissions()[0].GetVisitorId())
	require.Equal(t, "conv-1", subs.GetSubmissions()[0].GetConversationId())

	// Unpublished again: gone for visitors.
	pub = false
	_, err = owner.UpdateForm(ctx, &parleyv1.UpdateFormRequest{Id: id, Published: &pub, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"published"}}})
	require.NoError(t, err)
	_, err = anon.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, VisitorId: "v1", Values: ok})
	require.Equal(t, connect.CodeNotFound, code(err))

	// A key with only the chat scope may submit but not manage.
	keys := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	k, err := keys.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "widget backend", Scopes: []string{"chat"}})
	require.NoError(t, err)
	chatKey := k.GetSecret()
	_, err = client(e, chatKey).SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, Values: ok})
	require.NoError(t, err)
	_, err = client(e, chatKey).GetForm(ctx, &parleyv1.GetFormRequest{Id: id})
	require.Equal(t, connect.CodePermissionDenied, code(err))
	_, err = client(e, "not-a-key").GetForm(ctx, &parleyv1.GetFormRequest{Id: id})
	require.Equal(t, connect.CodeUnauthenticated, code(err), "a key that is sent is checked")
}

// Another organization's form and submissions: PermissionDenied by key
// (SPEC §5.6), nothing read or changed; its listing never shows them.
func TestFormTenantIsolation(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	a, b := client(e, e.A.Key), client(e, e.B.Key)
	created, err := a.CreateForm(ctx, contactForm())
	require.NoError(t, err)
	id := created.GetForm().GetId()
	ok := values(t, map[string]any{"first_name": "Ada", "email": "ada@example.com", "consent": true})
	_, err = a.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, Values: ok})
	require.NoError(t, err)

	name := "Mine now"
	for what, call := range map[string]func() error{
		"get": func() error { _, err := b.GetForm(ctx, &parleyv1.GetFormRequest{Id: id}); return err },
		"submit": func() error {
			_, err := b.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, Values: ok})
			return err
		},
		"update": func() error {
			_, err := b.UpdateForm(ctx, &parleyv1.UpdateFormRequest{Id: id, Name: &name, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}})
			return err
		},
		"delete": func() error { _, err := b.DeleteForm(ctx, &parleyv1.DeleteFormRequest{Id: id}); return err },
		"submissions": func() error {
			_, err := b.ListSubmissions(ctx, &parleyv1.ListSubmissionsRequest{FormId: id})
			return err
		},
	} {
		require.Equal(t, connect.CodePermissionDenied, code(call()), what)
	}
	list, err := b.ListForms(ctx, &parleyv1.ListFormsRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetForms())

	got, err := a.GetForm(ctx, &parleyv1.GetFormRequest{Id: id})
	require.NoError(t, err)
	require.Equal(t, "Contact us", got.GetForm().GetName())
	require.EqualValues(t, 1, got.GetForm().GetSubmissionCount(), "B's submission attempt stored nothing")

	_, err = b.GetForm(ctx, &parleyv1.GetFormRequest{Id: "00000000-0000-7000-8000-000000000000"})
	require.Equal(t, connect.CodeNotFound, code(err))
	_, err = b.GetForm(ctx, &parleyv1.GetFormRequest{Id: "nope"})
	require.Equal(t, connect.CodeNotFound, code(err))
}

func TestListingsPageByCursor(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	c := client(e, e.A.Key)
	var made []string
	for i := range 5 {
		req := contactForm()
		req.Name = fmt.Sprint("form ", i)
		f, err := c.CreateForm(ctx, req)
		require.NoError(t, err)
		made = append([]string{f.GetForm().GetId()}, made...)
	}
	var seen []string
	cursor := ""
	for range 3 {
		page, err := c.ListForms(ctx, &parleyv1.ListFormsRequest{Limit: 2, Cursor: cursor})
		require.NoError(t, err)
		for _, f := range page.GetForms() {
			seen = append(seen, f.GetId())
		}
		cursor = page.GetNextCursor()
	}
	require.Empty(t, cursor)
	require.Equal(t, made, seen, "newest first, each form once")

	id := made[0]
	var subs []string
	for i := range 5 {
		r, err := c.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, Values: values(t, map[string]any{
			"first_name": fmt.Sprint("n", i), "email": "a@b.co", "consent": true,
		})})
		require.NoError(t, err)
		subs = append([]string{r.GetId()}, subs...)
	}
	seen, cursor = nil, ""
	for {
		page, err := c.ListSubmissions(ctx, &parleyv1.ListSubmissionsRequest{FormId: id, Limit: 2, Cursor: cursor})
		require.NoError(t, err)
		for _, s := range page.GetSubmissions() {
			seen = append(seen, s.GetId())
		}
		if cursor = page.GetNextCursor(); cursor == "" {
			break
		}
	}
	require.Equal(t, subs, seen)
	_, err := c.ListSubmissions(ctx, &parleyv1.ListSubmissionsRequest{FormId: id, Cursor: "garbage"})
	require.Equal(t, connect.CodeInvalidArgument, code(err))
}

// A visitor's values that only look like their type are refused before
// anything is stored: a url whose port is not 1 to 65535, a one-line text
// holding a C1 control (NEL) or a Unicode line separator.
func TestPublicSubmissionsOfMalformedValuesStoreNothing(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	owner := client(e, e.A.Key)
	anon := client(e, "")
	created, err := owner.CreateForm(ctx, &parleyv1.CreateFormRequest{
		Name: "Links", Published: true,
		Fields: []*parleyv1.FormField{{Name: "name", Type: form.Text}, {Name: "site", Type: form.URL}},
	})
	require.NoError(t, err)
	id := created.GetForm().GetId()
	for _, tc := range []struct {
		values    map[string]any
		wantField string
	}{
		{map[string]any{"site": "https://example.com:65536/"}, "values.site"},
		{map[string]any{"site": "http://example.com:0/"}, "values.site"},
		{map[string]any{"name": "Ada\u0085Lovelace"}, "values.name"},
		{map[string]any{"name": "Ada\u2028Lovelace"}, "values.name"},
	} {
		_, err := anon.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, VisitorId: "v1", Values: values(t, tc.values)})
		require.Equal(t, connect.CodeInvalidArgument, code(err), "%v: %v", tc.values, err)
		require.Equal(t, tc.wantField, badField(t, err))
	}
	_, err = anon.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, VisitorId: "v1", Values: values(t, map[string]any{
		"name": "Ada", "site": "https://example.com:8443/",
	})})
	require.NoError(t, err)
	subs, err := owner.ListSubmissions(ctx, &parleyv1.ListSubmissionsRequest{FormId: id})
	require.NoError(t, err)
	require.Len(t, subs.GetSubmissions(), 1, "only the well-formed submission was stored")
}

// A name the schema's not-blank rule lets through (its \S is ASCII: a
// vertical tab, a no-break space) but that trims to nothing is refused, on
// creation and on update, rather than stored empty.
func TestFormNamesThatTrimToNothingAreRefused(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	c := client(e, e.A.Key)
	for _, blank := range []string{"\v", "\u00a0", "\u3000 \u0085"} {
		req := contactForm()
		req.Name = blank
		_, err := c.CreateForm(ctx, req)
		require.Equal(t, connect.CodeInvalidArgument, code(err), "%q: %v", blank, err)
		require.Equal(t, "name", badField(t, err))
	}
	created, err := c.CreateForm(ctx, contactForm())
	require.NoError(t, err)
	id := created.GetForm().GetId()
	blank := "\u00a0"
	_, err = c.UpdateForm(ctx, &parleyv1.UpdateFormRequest{Id: id, Name: &blank, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}})
	require.Equal(t, connect.CodeInvalidArgument, code(err), "%v", err)
	require.Equal(t, "name", badField(t, err))
	got, err := c.GetForm(ctx, &parleyv1.GetFormRequest{Id: id})
	require.NoError(t, err)
	require.Equal(t, "Contact us", got.GetForm().GetName(), "the name is unchanged")
	spaced := "  Renamed\u00a0"
	_, err = c.UpdateForm(ctx, &parleyv1.UpdateFormRequest{Id: id, Name: &spaced, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}}})
	require.NoError(t, err)
	got, err = c.GetForm(ctx, &parleyv1.GetFormRequest{Id: id})
	require.NoError(t, err)
	require.Equal(t, "Renamed", got.GetForm().GetName())
}
