package form

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/phone"
)

// Values are a submission's accepted values by field name: string (text,
// textarea, email, phone, url, date, select), float64 (number), bool
// (checkbox) or []string (multiselect). Fields left empty are absent.
type Values map[string]any

// JSON is v as stored and returned: a JSON object.
func (v Values) JSON() ([]byte, error) { return json.Marshal(map[string]any(v)) }

var (
	// email is the syntax of HTML's <input type=email> (WHATWG), the one
	// browsers check before a form is sent.
	email = regexp.MustCompile(`^[a-zA-Z0-9.!#$%&'*+/=?^_` + "`" + `{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`)
	// date is a calendar date as HTML's <input type=date> sends it.
	date = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
	// decimal is a number written as JSON writes one.
	decimal = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$`)
)

// Decode checks a submission's values against the schema and returns them
// normalized (trimmed, phone numbers in E.164). Names the form does not
// declare are refused first (in name order), then the form's fields are
// checked in their order. The first value at fault is Invalid with the
// field values.<name>; null, "" and [] are absent.
func (s *Schema) Decode(values map[string]*structpb.Value) (Values, error) {
	extra := make([]string, 0)
	for name := range values {
		if _, ok := s.byName[name]; !ok {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, apperr.InvalidField(path(extra[0]), "this form has no field %q", extra[0])
	}
	out := make(Values, len(values))
	for _, f := range s.fields {
		v, err := f.decode(values[f.GetName()])
		if err != nil {
			return nil, apperr.InvalidField(path(f.GetName()), "%s", err.msg)
		}
		if v != nil {
			out[f.GetName()] = v
		}
	}
	return out, nil
}

// path names a value in errors: values.<name>, the name as the form has it.
func path(name string) string { return "values." + name }

type problem struct{ msg string }

func bad(format string, args ...any) *problem {
	if len(args) == 0 {
		return &problem{format}
	}
	return &problem{fmt.Sprintf(format, args...)}
}

// decode checks one value; nil, nil when it is absent and may be.
func (f *field) decode(v *structpb.Value) (any, *problem) {
	val, p := f.typed(v)
	if p != nil {
		return nil, p
	}
	if val == nil {
		if f.GetRequired() {
			return nil, bad("required")
		}
		return nil, nil
	}
	return val, nil
}

// typed is v as f's type, nil when v is empty.
func (f *field) typed(v *structpb.Value) (any, *problem) {
	if v == nil {
		return nil, nil
	}
	if _, null := v.GetKind().(*structpb.Value_NullValue); null {
		return nil, nil
	}
	switch f.GetType() {
	case Checkbox:
		b, ok := v.GetKind().(*structpb.Value_BoolValue)
		if !ok {
			return nil, bad("must be true or false")
		}
		if f.GetRequired() && !b.BoolValue {
			return nil, bad("must be checked")
		}
		return b.BoolValue, nil
	case Number:
		return f.number(v)
	case Multiselect:
		return f.choices(v)
	}
	sv, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		return nil, bad("must be a string")
	}
	s := sv.StringValue
	if !utf8.ValidString(s) {
		return nil, bad("must be valid UTF-8")
	}
	if f.GetType() == Select {
		if s == "" {
			return nil, nil
		}
		if !f.options[s] {
			return nil, bad("must be one of the field's options")
		}
		return s, nil
	}
	s = strings.TrimSpace(s)
	if f.GetType() == Phone {
		s = phone.Normalize(s)
	}
	if s == "" {
		return nil, nil
	}
	if p := f.text(s); p != nil {
		return nil, p
	}
	return s, nil
}

// text checks a non-empty, trimmed string value of a string type.
func (f *field) text(s string) *problem {
	multiline := f.GetType() == Textarea
	for _, r := range s {
		// unicode.IsControl: C0, DEL and the C1 controls (NEL, CSI, ...).
		// U+2028 and U+2029 break lines as well.
		if (unicode.IsControl(r) && !(multiline && (r == '\n' || r == '\r' || r == '\t'))) ||
			(!multiline && (r == '\u2028' || r == '\u2029')) {
			if multiline {
				return bad("must not contain control characters")
			}
			return bad("must be one line without control characters")
		}
	}
	switch f.GetType() {
	case Email:
		if !email.MatchString(s) {
			return bad("must be an email address, e.g. name@example.com")
		}
	case Phone:
		if !phone.Valid(s) {
			return bad("must be a phone number in international (E.164) format: a plus, the country code and the number, e.g. +33612345678")
		}
	case URL:
		if p := checkURL(s); p != nil {
			return p
		}
	case Date:
		if _, err := time.Parse(time.DateOnly, s); err != nil || !date.MatchString(s) {
			return bad("must be a date as YYYY-MM-DD, e.g. 2025-03-31")
		}
	}
	n := utf8.RuneCountInString(s)
	if f.maxLen >= 0 && n > f.maxLen {
		return bad("at most %d characters, not %d", f.maxLen, n)
	}
	if f.minLen >= 0 && n < f.minLen {
		return bad("at least %d characters, not %d", f.minLen, n)
	}
	if f.pattern != nil && !f.pattern.MatchString(s) {
		return bad("does not match the field's pattern")
	}
	return nil
}

func checkURL(s string) *problem {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "" || u.Hostname() == "" ||
		strings.ContainsAny(s, " \\") {
		return bad("must be an http or https URL, e.g. https://example.com")
	}
	// url.Parse checks only that a port is digits; an empty one is the
	// scheme's default.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad("must be an http or https URL, e.g. https://example.com (a port is 1 to 65535)")
		}
	}
	return nil
}

// number is v as a number field's value: a JSON number, or a string that
// holds one (as an HTML input sends it).
func (f *field) number(v *structpb.Value) (any, *problem) {
	var n float64
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		n = k.NumberValue
	case *structpb.Value_StringValue:
		s := strings.TrimSpace(k.StringValue)
		if s == "" {
			return nil, nil
		}
		if !decimal.MatchString(s) {
			return nil, bad("must be a number")
		}
		var err error
		if n, err = strconv.ParseFloat(s, 64); err != nil {
			return nil, bad("must be a number")
		}
	default:
		return nil, bad("must be a number")
	}
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return nil, bad("must be a finite number")
	}
	if f.Min != nil && n < f.GetMin() {
		return nil, bad("must be at least %s", formatNumber(f.GetMin()))
	}
	if f.Max != nil && n > f.GetMax() {
		return nil, bad("must be at most %s", formatNumber(f.GetMax()))
	}
	return n, nil
}

// choices is v as a multiselect's value: a list of distinct options.
func (f *field) choices(v *structpb.Value) (any, *problem) {
	l, ok := v.GetKind().(*structpb.Value_ListValue)
	if !ok {
		return nil, bad("must be a list of the field's options")
	}
	items := l.ListValue.GetValues()
	if len(items) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, ok := it.GetKind().(*structpb.Value_StringValue)
		if !ok || !f.options[s.StringValue] {
			return nil, bad("must be a list of the field's options")
		}
		if slices.Contains(out, s.StringValue) {
			return nil, bad("lists %q twice", s.StringValue)
		}
		out = append(out, s.StringValue)
	}
	if f.maxLen >= 0 && len(out) > f.maxLen {
		return nil, bad("at most %d choices, not %d", f.maxLen, len(out))
	}
	if f.minLen >= 0 && len(out) < f.minLen {
		return nil, bad("at least %d choices, not %d", f.minLen, len(out))
	}
	return out, nil
}

// formatNumber writes n as JSON does.
func formatNumber(n float64) string {
	b, err := json.Marshal(n)
	if err != nil {
		return strconv.FormatFloat(n, 'g', -1, 64)
	}
	return string(b)
}
