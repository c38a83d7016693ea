package form_test

import (
	"encoding/json"
	"errors"
	"math"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/form"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/compat"
	"github.com/parleyhq/parley/compat/wire"
)

// fuzzForm has a field of every type.
var fuzzForm = []*parleyv1.FormField{
	{Name: "text", Type: form.Text, Max: f64(20), Pattern: `[^<>]*`},
	{Name: "area", Type: form.Textarea},
	{Name: "email", Type: form.Email},
	{Name: "phone", Type: form.Phone},
	{Name: "number", Type: form.Number, Min: f64(-10), Max: f64(10)},
	{Name: "url", Type: form.URL},
	{Name: "date", Type: form.Date},
	{Name: "select", Type: form.Select, Options: []string{"a", "b"}},
	{Name: "multi", Type: form.Multiselect, Options: []string{"x", "y", "z"}, Max: f64(2)},
	{Name: "ok", Type: form.Checkbox, Required: true},
}

// FuzzDecodeSubmission feeds REST bodies through the submission decoder
// (compat.DecodeSubmission, the schema's rules, then Schema.Decode) and checks what it accepts
// against independent parsers: it never panics; an error is Invalid and
// names a field (the body, a request field or values.<name>, one that was
// sent unless it is required); an accepted
// submission holds only declared fields, each as its type says (emails
// net/mail reads as the bare address, URLs net/url reads as http(s) with a
// host, dates time reads, E.164 numbers, finite numbers in range, options)
// and decoding it again gives it back unchanged.
func FuzzDecodeSubmission(f *testing.F) {
	for _, seed := range []string{
		`{"values":{"text":"hi","ok":true},"visitorId":"v1"}`,
		`{"values":{"email":"a@b.co","phone":"+33 6 12 34 56 78","number":"3.5","ok":true}}`,
		`{"values":{"url":"https://x.io/a?b","date":"2024-02-29","select":"a","multi":["x","z"],"ok":true}}`,
		`{"values":{"area":"l1\nl2","number":-10,"ok":true},"conversationId":"c"}`,
		`{"values":{"nope":1}}`,
		`{"values":[1]}`,
		`{"values":{"ok":false}}`,
		`{"values":{"email":"Ada <a@b.co>","ok":true}}`,
		`{"values":{"number":1e400,"ok":true}}`,
		`{"values":null}`,
		`{"other":1}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	schema, err := form.Compile(fuzzForm)
	if err != nil {
		f.Fatal(err)
	}
	// Some field: the body, a request field (an unknown one, named as
	// sent), a value.
	field := regexp.MustCompile(`(?s)^.+$`) // a name sent may hold a newline
	e164 := regexp.MustCompile(`^\+[1-9][0-9]{1,14}$`)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := compat.DecodeSubmission("f", body)
		if err == nil {
			// The schema's rules, as the REST path and Connect run them.
			err = wire.Validate(protovalidate.GlobalValidator, req)
		}
		if err != nil {
			checkInvalid(t, err, field)
			return
		}
		got, err := schema.Decode(req.GetValues())
		if err != nil {
			checkInvalid(t, err, field)
			var e *apperr.Error
			errors.As(err, &e)
			name := strings.TrimPrefix(e.Field, "values.")
			if _, sent := req.GetValues()[name]; !sent && name != "ok" {
				t.Fatalf("%s refused but not sent", e.Field)
			}
			return
		}
		if got["ok"] != true {
			t.Fatalf("the required checkbox was not checked: %v", got)
		}
		for name, v := range got {
			switch name {
			case "text", "area":
				s := v.(string)
				if s == "" || s != strings.TrimSpace(s) || !utf8.ValidString(s) {
					t.Fatalf("%s: %q", name, s)
				}
				if name == "text" && (strings.ContainsAny(s, "<>\n\r") || utf8.RuneCountInString(s) > 20) {
					t.Fatalf("text beyond its field's rules: %q", s)
				}
			case "email":
				s := v.(string)
				a, err := mail.ParseAddress(s)
				if err != nil || a.Address != s || a.Name != "" {
					// net/mail is stricter about dots (a..b@c): HTML's
					// syntax, which browsers check, allows them.
					if !strings.Contains(s, "..") && !strings.HasPrefix(s, ".") && !strings.Contains(s, ".@") {
						t.Fatalf("email %q is not an address net/mail reads (%v)", s, err)
					}
				}
			case "phone":
				if !e164.MatchString(v.(string)) {
					t.Fatalf("phone %q", v)
				}
			case "number":
				n := v.(float64)
				if math.IsNaN(n) || n < -10 || n > 10 {
					t.Fatalf("number %v", n)
				}
			case "url":
				u, err := url.Parse(v.(string))
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					t.Fatalf("url %q (%v)", v, err)
				}
			case "date":
				d, err := time.Parse(time.DateOnly, v.(string))
				if err != nil || d.Format(time.DateOnly) != v {
					t.Fatalf("date %q (%v)", v, err)
				}
			case "select":
				if v != "a" && v != "b" {
					t.Fatalf("select %q", v)
				}
			case "multi":
				l := v.([]string)
				if len(l) == 0 || len(l) > 2 {
					t.Fatalf("multi %q", l)
				}
				for i, x := range l {
					if !slices.Contains([]string{"x", "y", "z"}, x) || slices.Contains(l[:i], x) {
						t.Fatalf("multi %q", l)
					}
				}
			case "ok":
			default:
				t.Fatalf("undeclared field %q accepted", name)
			}
		}
		// What is stored decodes again to itself.
		data, err := got.JSON()
		if err != nil {
			t.Fatal(err)
		}
		again := &structpb.Struct{}
		if err := protojson.Unmarshal(data, again); err != nil {
			t.Fatal(err)
		}
		got2, err := schema.Decode(again.GetFields())
		if err != nil {
			t.Fatalf("stored values refused on a second decode: %v (%s)", err, data)
		}
		data2, _ := got2.JSON()
		if string(data) != string(data2) {
			t.Fatalf("decoding is not stable: %s then %s", data, data2)
		}
		var check map[string]any
		if err := json.Unmarshal(data, &check); err != nil {
			t.Fatal(err)
		}
	})
}

func checkInvalid(t *testing.T, err error, field *regexp.Regexp) {
	t.Helper()
	var e *apperr.Error
	if !errors.As(err, &e) || e.Code != apperr.Invalid {
		t.Fatalf("not an Invalid error: %v", err)
	}
	if !field.MatchString(e.Field) {
		t.Fatalf("error names %q", e.Field)
	}
}
