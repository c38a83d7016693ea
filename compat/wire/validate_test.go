package wire

import (
	"errors"
	"testing"

	"buf.build/go/protovalidate"

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
