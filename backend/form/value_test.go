package form_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/form"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

func f64(v float64) *float64 { return &v }

// jsonValue is a JSON text as the value a client sends.
func jsonValue(t testing.TB, text string) *structpb.Value {
	t.Helper()
	v := &structpb.Value{}
	require.NoError(t, protojson.Unmarshal([]byte(text), v), text)
	return v
}

// Every field type, its value rules one case at a time: the value (JSON,
// "" for absent) and what is stored, or the error's message.
func TestDecodeEveryType(t *testing.T) {
	t.Parallel()
	type tc struct {
		value   string
		want    any
		wantErr string
	}
	for _, group := range []struct {
		field *parleyv1.FormField
		cases []tc
	}{
		{&parleyv1.FormField{Name: "name", Type: form.Text, Required: true}, []tc{
			{`"Ada"`, "Ada", ""},
			{`"  Ada Lovelace \t"`, "Ada Lovelace", ""},
			{`"Zoë 名前"`, "Zoë 名前", ""},
			{``, nil, "required"},
			{`null`, nil, "required"},
			{`""`, nil, "required"},
			{`"   "`, nil, "required"},
			{`42`, nil, "must be a string"},
			{`true`, nil, "must be a string"},
			{`["Ada"]`, nil, "must be a string"},
			{`{"a":1}`, nil, "must be a string"},
			{`"two\nlines"`, nil, "one line"},
			{`"nul\u0000"`, nil, "one line"},
			{`"del\u007f"`, nil, "one line"},
			// C1 controls (U+0080-U+009F, NEL among them) and the Unicode
			// line and paragraph separators are control characters and line
			// breaks too.
			{`"next\u0085line"`, nil, "one line"},
			{`"csi\u009b"`, nil, "one line"},
			{`"two\u2028lines"`, nil, "one line"},
			{`"two\u2029paragraphs"`, nil, "one line"},
			{`"` + strings.Repeat("a", 1000) + `"`, strings.Repeat("a", 1000), ""},
			{`"` + strings.Repeat("a", 1001) + `"`, nil, "at most 1000 characters"},
			{`"` + strings.Repeat("é", 1000) + `"`, strings.Repeat("é", 1000), ""},
		}},
		{&parleyv1.FormField{Name: "code", Type: form.Text, Min: f64(2), Max: f64(4), Pattern: `[A-Z]+`}, []tc{
			{`"AB"`, "AB", ""},
			{`"ABCD"`, "ABCD", ""},
			{`"A"`, nil, "at least 2 characters"},
			{`"ABCDE"`, nil, "at most 4 characters"},
			{`"ab"`, nil, "pattern"},
			{`"AB1"`, nil, "pattern"},
			{`"xAB"`, nil, "pattern"},
			{``, nil, ""},
			{`""`, nil, ""},
		}},
		{&parleyv1.FormField{Name: "message", Type: form.Textarea}, []tc{
			{`"line 1\nline 2\r\n\tindented"`, "line 1\nline 2\r\n\tindented", ""},
			{`"bell\u0007"`, nil, "control characters"},
			{`"next\u0085line"`, nil, "control characters"},
			{`"line\u2028separator"`, "line\u2028separator", ""},
			{`"` + strings.Repeat("a", 10000) + `"`, strings.Repeat("a", 10000), ""},
			{`"` + strings.Repeat("a", 10001) + `"`, nil, "at most 10000 characters"},
			{`12`, nil, "must be a string"},
			{``, nil, ""},
		}},
		{&parleyv1.FormField{Name: "email", Type: form.Email, Required: true}, []tc{
			{`"ada@example.com"`, "ada@example.com", ""},
			{`" Ada.Lovelace+forms@mail.example.co.uk "`, "Ada.Lovelace+forms@mail.example.co.uk", ""},
			{`"o'brien@example.ie"`, "o'brien@example.ie", ""},
			{`"ada@localhost"`, "ada@localhost", ""},
			{`"ada"`, nil, "email address"},
			{`"ada@"`, nil, "email address"},
			{`"@example.com"`, nil, "email address"},
			{`"ada@@example.com"`, nil, "email address"},
			{`"ada@example..com"`, nil, "email address"},
			{`"ada@-example.com"`, nil, "email address"},
			{`"ada @example.com"`, nil, "email address"},
			{`"Ada <ada@example.com>"`, nil, "email address"},
			{`"ada@exa_mple.com"`, nil, "email address"},
			{`"ada@example.com\nBcc: x@y.z"`, nil, "one line"},
			{`"` + strings.Repeat("a", 250) + `@b.co"`, nil, "at most 254 characters"},
			{`5`, nil, "must be a string"},
			{``, nil, "required"},
		}},
		{&parleyv1.FormField{Name: "phone", Type: form.Phone}, []tc{
			{`"+33612345678"`, "+33612345678", ""},
			{`"+33 6 12-34-56-78"`, "+33612345678", ""},
			{`"+1 (415) 555.0100"`, "+14155550100", ""},
			{`"+123456789012345"`, "+123456789012345", ""},
			{`"+1234567890123456"`, nil, "E.164"},
			{`"0612345678"`, nil, "E.164"},
			{`"+0612345678"`, nil, "E.164"},
			{`"+33 6 12 34 56 7a"`, nil, "E.164"},
			{`"+"`, nil, "E.164"},
			{`"+1"`, nil, "E.164"},
			// As contacts take them (package phone): 7 digits at least,
			// a "(0)" trunk prefix dropped.
			{`"+12"`, nil, "E.164"},
			{`"+33 (0)6 12 34 56 78"`, "+33612345678", ""},
			{`33612345678`, nil, "must be a string"},
			{`" - "`, nil, ""},
		}},
		{&parleyv1.FormField{Name: "age", Type: form.Number, Required: true, Min: f64(18), Max: f64(120)}, []tc{
			{`18`, 18.0, ""},
			{`42.5`, 42.5, ""},
			{`120`, 120.0, ""},
			{`"64"`, 64.0, ""},
			{`" 1.8e1 "`, 18.0, ""},
			{`17.99`, nil, "at least 18"},
			{`121`, nil, "at most 120"},
			{`"12abc"`, nil, "must be a number"},
			{`"0x20"`, nil, "must be a number"},
			{`"Infinity"`, nil, "must be a number"},
			{`"NaN"`, nil, "must be a number"},
			{`"1_000"`, nil, "must be a number"},
			{`"+20"`, nil, "must be a number"},
			{`true`, nil, "must be a number"},
			{`[20]`, nil, "must be a number"},
			{`""`, nil, "required"},
			{``, nil, "required"},
		}},
		{&parleyv1.FormField{Name: "delta", Type: form.Number}, []tc{
			{`-5`, -5.0, ""},
			{`0`, 0.0, ""},
			{`1e308`, 1e308, ""},
			{`"-0.5"`, -0.5, ""},
		}},
		{&parleyv1.FormField{Name: "site", Type: form.URL}, []tc{
			{`"https://example.com"`, "https://example.com", ""},
			{`"http://example.com:8080/a?b=c#d"`, "http://example.com:8080/a?b=c#d", ""},
			{`"HTTPS://EXAMPLE.COM/"`, "HTTPS://EXAMPLE.COM/", ""},
			{`"ftp://example.com"`, nil, "http or https"},
			{`"javascript:alert(1)"`, nil, "http or https"},
			{`"example.com"`, nil, "http or https"},
			{`"https://"`, nil, "http or https"},
			{`"https:example.com"`, nil, "http or https"},
			{`"https://exa mple.com"`, nil, "http or https"},
			// A port is 1 to 65535 (url.Parse checks only that it is digits).
			{`"https://example.com:65535/"`, "https://example.com:65535/", ""},
			{`"https://example.com:/"`, "https://example.com:/", ""},
			{`"https://example.com:0/"`, nil, "http or https"},
			{`"https://example.com:65536/"`, nil, "http or https"},
			{`"https://example.com:99999999999999999999/"`, nil, "http or https"},
			{`"https://example.com/` + strings.Repeat("a", 2048) + `"`, nil, "at most 2048 characters"},
			{`1`, nil, "must be a string"},
		}},
		{&parleyv1.FormField{Name: "day", Type: form.Date, Required: true}, []tc{
			{`"2025-03-31"`, "2025-03-31", ""},
			{`"2024-02-29"`, "2024-02-29", ""},
			{`"2025-02-29"`, nil, "YYYY-MM-DD"},
			{`"2025-13-01"`, nil, "YYYY-MM-DD"},
			{`"2025-3-31"`, nil, "YYYY-MM-DD"},
			{`"31/03/2025"`, nil, "YYYY-MM-DD"},
			{`"2025-03-31T10:00:00Z"`, nil, "YYYY-MM-DD"},
			{`"+2025-03-31"`, nil, "YYYY-MM-DD"},
			{`20250331`, nil, "must be a string"},
			{``, nil, "required"},
		}},
		{&parleyv1.FormField{Name: "size", Type: form.Select, Required: true, Options: []string{"S", "M", "L", " XL"}}, []tc{
			{`"M"`, "M", ""},
			{`" XL"`, " XL", ""},
			{`"XL"`, nil, "one of the field's options"},
			{`"m"`, nil, "one of the field's options"},
			{`"M "`, nil, "one of the field's options"},
			{`["M"]`, nil, "must be a string"},
			{`""`, nil, "required"},
		}},
		{&parleyv1.FormField{Name: "topics", Type: form.Multiselect, Required: true, Options: []string{"a", "b", "c"}, Max: f64(2)}, []tc{
			{`["a"]`, []string{"a"}, ""},
			{`["c","a"]`, []string{"c", "a"}, ""},
			{`["a","b","c"]`, nil, "at most 2 choices"},
			{`["a","a"]`, nil, "twice"},
			{`["d"]`, nil, "field's options"},
			{`["a",1]`, nil, "field's options"},
			{`"a"`, nil, "list of the field's options"},
			{`[]`, nil, "required"},
			{`null`, nil, "required"},
		}},
		{&parleyv1.FormField{Name: "extras", Type: form.Multiselect, Options: []string{"a", "b", "c"}, Min: f64(2)}, []tc{
			{`["a","b"]`, []string{"a", "b"}, ""},
			{`["a"]`, nil, "at least 2 choices"},
			{`[]`, nil, ""},
		}},
		{&parleyv1.FormField{Name: "consent", Type: form.Checkbox, Required: true}, []tc{
			{`true`, true, ""},
			{`false`, nil, "must be checked"},
			{`"true"`, nil, "true or false"},
			{`1`, nil, "true or false"},
			{``, nil, "required"},
		}},
		{&parleyv1.FormField{Name: "newsletter", Type: form.Checkbox}, []tc{
			{`true`, true, ""},
			{`false`, false, ""},
			{``, nil, ""},
		}},
	} {
		schema, err := form.Compile([]*parleyv1.FormField{group.field})
		require.NoError(t, err)
		name := group.field.GetName()
		for _, c := range group.cases {
			t.Run(group.field.GetType()+"/"+name+"/"+c.value, func(t *testing.T) {
				values := map[string]*structpb.Value{}
				if c.value != "" {
					values[name] = jsonValue(t, c.value)
				}
				got, err := schema.Decode(values)
				if c.wantErr != "" {
					require.Error(t, err)
					var e *apperr.Error
					require.ErrorAs(t, err, &e)
					if got, want := e.Code, apperr.Invalid; got != want {
						t.Fatalf("code %s, want %s", got, want)
					}
					require.Equal(t, "values."+name, e.Field)
					require.Contains(t, e.Message, c.wantErr)
					return
				}
				require.NoError(t, err)
				if c.want == nil {
					require.NotContains(t, got, name)
					return
				}
				require.Equal(t, c.want, got[name])
			})
		}
	}
}

func TestDecodeRefusesUndeclaredFieldsFirst(t *testing.T) {
	t.Parallel()
	schema, err := form.Compile([]*parleyv1.FormField{
		{Name: "email", Type: form.Email, Required: true},
		{Name: "name", Type: form.Text, Required: true},
	})
	require.NoError(t, err)
	values := map[string]*structpb.Value{"zzz": structpb.NewStringValue("x"), "emial": structpb.NewStringValue("a@b.c")}
	_, err = schema.Decode(values)
	var e *apperr.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "values.emial", e.Field, "undeclared names come first, in name order")
	require.Contains(t, e.Message, "no field")

	// Then the form's order: the first field at fault is named.
	_, err = schema.Decode(map[string]*structpb.Value{"name": structpb.NewStringValue("")})
	require.ErrorAs(t, err, &e)
	require.Equal(t, "values.email", e.Field)
	_, err = schema.Decode(map[string]*structpb.Value{"email": structpb.NewStringValue("a@b.co")})
	require.ErrorAs(t, err, &e)
	require.Equal(t, "values.name", e.Field)

	got, err := schema.Decode(map[string]*structpb.Value{"email": structpb.NewStringValue("a@b.co"), "name": structpb.NewStringValue("Ada")})
	require.NoError(t, err)
	require.Equal(t, form.Values{"email": "a@b.co", "name": "Ada"}, got)
}

// Compile's rules, those the schema cannot state: patterns compile (RE2),
// lengths fit their type's cap, multiselect bounds fit the options.
func TestCompile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		field     *parleyv1.FormField
		wantField string
	}{
		{"ok text", &parleyv1.FormField{Name: "a", Type: form.Text, Pattern: `[a-z]+`, Min: f64(1), Max: f64(10)}, ""},
		{"ok number", &parleyv1.FormField{Name: "a", Type: form.Number, Min: f64(-1e9), Max: f64(1e9)}, ""},
		{"bad pattern", &parleyv1.FormField{Name: "a", Type: form.Text, Pattern: `[a-z`}, "fields[0].pattern"},
		{"no backreferences in RE2", &parleyv1.FormField{Name: "a", Type: form.Text, Pattern: `(a)\1`}, "fields[0].pattern"},
		{"no lookahead in RE2", &parleyv1.FormField{Name: "a", Type: form.Text, Pattern: `(?=a)`}, "fields[0].pattern"},
		{"text max over cap", &parleyv1.FormField{Name: "a", Type: form.Text, Max: f64(1001)}, "fields[0].max"},
		{"email min over cap", &parleyv1.FormField{Name: "a", Type: form.Email, Min: f64(300)}, "fields[0].min"},
		{"multiselect min over options", &parleyv1.FormField{Name: "a", Type: form.Multiselect, Options: []string{"x"}, Min: f64(2)}, "fields[0].min"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := form.Compile([]*parleyv1.FormField{c.field})
			if c.wantField == "" {
				require.NoError(t, err)
				return
			}
			var e *apperr.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, c.wantField, e.Field)
		})
	}
	many := make([]*parleyv1.FormField, form.MaxFields+1)
	for i := range many {
		many[i] = &parleyv1.FormField{Name: "f" + strings.Repeat("x", i), Type: form.Text}
	}
	_, err := form.Compile(many)
	require.Error(t, err)
	_, err = form.Compile(many[:form.MaxFields])
	require.NoError(t, err)
	_, err = form.Compile([]*parleyv1.FormField{{Name: "a", Type: form.Text}, {Name: "a", Type: form.Email}})
	require.Error(t, err)
}

func TestFieldsRoundTrip(t *testing.T) {
	t.Parallel()
	in := []*parleyv1.FormField{
		{Name: "a", Label: "A", Type: form.Number, Required: true, Min: f64(0), Max: f64(5), Options: []string{}},
		{Name: "b", Type: form.Select, Options: []string{"x", "y"}},
		{Name: "c", Type: form.Text, Pattern: `\d+`, Options: []string{}},
	}
	b, err := form.MarshalFields(in)
	require.NoError(t, err)
	out, err := form.UnmarshalFields(b)
	require.NoError(t, err)
	require.Len(t, out, 3)
	for i := range in {
		require.True(t, proto.Equal(in[i], out[i]), "%v != %v", in[i], out[i])
	}
	require.NotNil(t, out[0].Min, "a min of 0 is kept as set")
}
