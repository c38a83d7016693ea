package wire

import (
	"errors"
	"strings"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// A string that is not valid UTF-8 (from a form, a query or a multipart
// part; protobuf's decoders refuse it themselves) is Invalid and named,
// at any depth, before Postgres sees it.
func TestValidateRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	v, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		msg       *parleyv1.CreateDatastoreRequest
		wantField string
	}{
		{&parleyv1.CreateDatastoreRequest{Name: "\xff"}, "name"},
		{&parleyv1.CreateDatastoreRequest{Name: "ok", Description: "caf\xe9"}, "description"},
	} {
		err := Validate(v, tc.msg)
		var e *apperr.Error
		if !errors.As(err, &e) {
			t.Fatalf("%v: got %v, want an Invalid error", tc.msg, err)
		}
		if got, want := e.Code, apperr.Invalid; got != want {
			t.Fatalf("%v: code %v, want %v", tc.msg, got, want)
		}
		if got, want := e.Field, tc.wantField; got != want {
			t.Fatalf("%v: field %q, want %q", tc.msg, got, want)
		}
	}

	nested := &parleyv1.CreateAgentRequest{Name: "a", Instructions: "b", ToolSettings: &parleyv1.ToolSettings{
		HttpRequest: &parleyv1.HttpRequestSettings{Endpoints: []*parleyv1.HttpEndpoint{{Headers: map[string]string{"X-Key": "\xc3"}}}},
	}}
	err = ValidUTF8(nested)
	if got, want := apperr.CodeOf(err), apperr.Invalid; got != want {
		t.Fatalf("nested: %v, want Invalid", err)
	}
	if e := (*apperr.Error)(nil); errors.As(err, &e) && e.Field != "toolSettings.httpRequest.endpoints[0].headers.X-Key" {
		t.Fatalf("nested: field %q", e.Field)
	}
}

// nested returns a JSON value of n arrays, one in the other, around "x".
func nested(n int) *structpb.Value {
	v := structpb.NewStringValue("x")
	for range n {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	return v
}

func chatWith(fields map[string]*structpb.Value) *parleyv1.ChatRequest {
	return &parleyv1.ChatRequest{AgentId: "a", Query: "hi", ConversationId: "c",
		Contact: &parleyv1.Contact{Email: "a@b.co", CustomFields: &structpb.Struct{Fields: fields}}}
}

// A request nested deeper than MaxDepth is refused by both walks, naming
// where, however deep it goes (the decoders allow 10,000 levels; the walks
// used to build each path as they went, quadratic in the depth). A path
// through free-form JSON names its keys and indexes as the client sent
// them.
func TestNestingDepth(t *testing.T) {
	t.Parallel()
	// ChatRequest, Contact, Struct, then two messages a level: 30 arrays
	// put the innermost Value at depth 63, 31 at 65.
	ok := chatWith(map[string]*structpb.Value{"k": nested(30)})
	for _, check := range []func(proto.Message) error{NoNUL, ValidUTF8} {
		if err := check(ok); err != nil {
			t.Fatalf("30 levels: %v", err)
		}
		for _, n := range []int{31, 9000} {
			err := check(chatWith(map[string]*structpb.Value{"k": nested(n)}))
			var e *apperr.Error
			if !errors.As(err, &e) || e.Code != apperr.Invalid {
				t.Fatalf("%d levels: got %v, want Invalid", n, err)
			}
			if want := "contact.customFields.k" + strings.Repeat("[0]", 31); e.Field != want {
				t.Fatalf("%d levels: field %q, want %q", n, e.Field, want)
			}
			if !strings.Contains(e.Message, "nests too deeply") {
				t.Fatalf("%d levels: message %q", n, e.Message)
			}
		}
	}
}

// A NUL in free-form JSON is named by the client's keys and indexes, a NUL
// in one of its keys by the field that holds them.
func TestFreeFormPaths(t *testing.T) {
	t.Parallel()
	list := structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
		structpb.NewStringValue("fine"),
		structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"b": structpb.NewStringValue("bad\x00")}}),
	}})
	for _, tc := range []struct {
		fields map[string]*structpb.Value
		want   string
	}{
		{map[string]*structpb.Value{"k": structpb.NewStringValue("a\x00")}, "contact.customFields.k"},
		{map[string]*structpb.Value{"a": list}, "contact.customFields.a[1].b"},
		{map[string]*structpb.Value{"k\x00": structpb.NewStringValue("a")}, "contact.customFields"},
		// Keys JSONName would change are quoted, and kept as sent.
		{map[string]*structpb.Value{"my_key": structpb.NewStringValue("a\x00")}, `contact.customFields["my_key"]`},
		{map[string]*structpb.Value{`a"b`: structpb.NewStringValue("a\x00")}, `contact.customFields["a\"b"]`},
	} {
		err := NoNUL(chatWith(tc.fields))
		var e *apperr.Error
		if !errors.As(err, &e) || e.Code != apperr.Invalid {
			t.Fatalf("%v: got %v, want Invalid", tc.fields, err)
		}
		if e.Field != tc.want {
			t.Fatalf("field %q, want %q", e.Field, tc.want)
		}
		// The REST error names it again by JSONName: unchanged.
		if got := JSONName(e.Field); got != tc.want {
			t.Fatalf("JSONName(%q) = %q", e.Field, got)
		}
	}
}

// JSONName camel-cases the schema's names, never a map key the client
// sent, quoted as protovalidate quotes it.
func TestJSONNameKeepsMapKeys(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"visitor_id": "visitorId",
		"tool_settings.http_request.endpoints[0].headers[\"X_Key\"]": `toolSettings.http_request.endpoints[0].headers["X_Key"]`,
		`contact.custom_fields["a\"_b"].x_y`:                         `contact.customFields["a\"_b"].xY`,
		`m["a\\"].b_c`:                                               `m["a\\"].bC`,
	} {
		if got := JSONName(path); got != want {
			t.Errorf("JSONName(%q) = %q, want %q", path, got, want)
		}
	}
}

// A message-level rule (protovalidate reports it with no field) names the
// field its id ends with, in REST's error and, through NameRuleFields, in
// the violation Connect sends; a rule about no one field names none, with
// no empty field before its message, and nested messages' rules keep the
// path of the message.
func TestMessageRulesNameTheirField(t *testing.T) {
	t.Parallel()
	v, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		msg                  proto.Message
		wantField, wantProto string
		wantMessage          string
	}{
		{&parleyv1.CreateDatasourceRequest{DatastoreId: "d", Type: "text", Text: "  "}, "text", "text", "text is required for a text datasource"},
		{&parleyv1.CreateDatasourceRequest{DatastoreId: "d", Type: "web_page"}, "url", "url", "url is required for web_page and web_site datasources"},
		{&parleyv1.CreateDatasourceRequest{DatastoreId: "d", Type: "qa", Answer: "a"}, "question", "question", "question is required for a qa datasource"},
		{&parleyv1.UpdateConversationRequest{ConversationId: "c"}, "", "", "name status or rating"},
		{&parleyv1.CreateFormRequest{Name: "f", Fields: []*parleyv1.FormField{{Name: "a", Type: "select"}}}, "fields[0]", "fields[0]",
			"fields[0]: select and multiselect fields need options; other types take none"},
	} {
		err := Validate(v, tc.msg)
		var e *apperr.Error
		if !errors.As(err, &e) || e.Code != apperr.Invalid {
			t.Fatalf("%v: got %v, want Invalid", tc.msg, err)
		}
		if got, want := e.Field, tc.wantField; got != want {
			t.Errorf("%v: field %q, want %q", tc.msg, got, want)
		}
		if got, want := e.Message, tc.wantMessage; got != want {
			t.Errorf("%v: message %q, want %q", tc.msg, got, want)
		}

		err = NameRuleFields(v).Validate(tc.msg)
		var verr *protovalidate.ValidationError
		if !errors.As(err, &verr) {
			t.Fatalf("%v: got %v, want a ValidationError", tc.msg, err)
		}
		if got, want := protovalidate.FieldPathString(verr.ToProto().GetViolations()[0].GetField()), tc.wantProto; got != want {
			t.Errorf("%v: Connect's violation names %q, want %q", tc.msg, got, want)
		}
		// Validating with the wrapped validator says the same.
		err = Validate(NameRuleFields(v), tc.msg)
		if !errors.As(err, &e) || e.Field != tc.wantField || e.Message != tc.wantMessage {
			t.Errorf("%v: through NameRuleFields: %v", tc.msg, err)
		}
	}
}

// The schema keeps the convention nameRuleField reads: a message-level
// rule of a request whose id ends in a field's name has a message that
// names it first. (Rules of nested messages, such as FormField's, are
// reported at the message's path and named by it.)
func TestRuleIDsNamingAFieldSayItInTheirMessage(t *testing.T) {
	t.Parallel()
	seen := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("parley.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			methods := fd.Services().Get(i).Methods()
			for j := range methods.Len() {
				md := methods.Get(j).Input()
				rules, _ := proto.GetExtension(md.Options(), validate.E_Message).(*validate.MessageRules)
				for _, r := range rules.GetCel() {
					id := r.GetId()
					f := md.Fields().ByName(protoreflect.Name(id[strings.LastIndexByte(id, '.')+1:]))
					if f == nil {
						continue
					}
					seen++
					if !strings.HasPrefix(r.GetMessage(), string(f.Name())+" ") {
						t.Errorf("%s: rule %s is about %s, but its message %q does not begin with it", md.FullName(), id, f.Name(), r.GetMessage())
					}
				}
			}
		}
		return true
	})
	if seen == 0 {
		t.Fatal("found no message-level rule naming a field")
	}
}
