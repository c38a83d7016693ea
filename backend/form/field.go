package form

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// The field types.
const (
	Text        = "text"
	Textarea    = "textarea"
	Email       = "email"
	Phone       = "phone"
	Number      = "number"
	URL         = "url"
	Date        = "date"
	Select      = "select"
	Multiselect = "multiselect"
	Checkbox    = "checkbox"
)

// MaxFields bounds a form's fields (the schema says so too).
const MaxFields = 50

// maxLength caps the length (in characters) of a value of each string type,
// whatever its field's max says.
var maxLength = map[string]int{
	Text:     1000,
	Textarea: 10000,
	Email:    254,
	Phone:    16,
	URL:      2048,
}

// field is one form field with its checks ready.
type field struct {
	*parleyv1.FormField
	pattern *regexp.Regexp
	// patternSize is pattern's instructions (patternSize).
	patternSize int
	options     map[string]bool
	// minLen and maxLen bound a string value's length (in characters) or
	// a multiselect's number of choices; -1: no bound.
	minLen, maxLen int
}

// Schema is a form's fields, ready to check submissions.
type Schema struct {
	fields []field
	byName map[string]int
}

// Fields are the schema's fields, in order.
func (s *Schema) Fields() []*parleyv1.FormField {
	out := make([]*parleyv1.FormField, len(s.fields))
	for i, f := range s.fields {
		out[i] = f.FormField
	}
	return out
}

// Names are the fields' names, in order.
func (s *Schema) Names() []string {
	out := make([]string, len(s.fields))
	for i, f := range s.fields {
		out[i] = f.GetName()
	}
	return out
}

// Compile checks fields by the rules the schema (protovalidate) cannot
// state and returns their Schema: every pattern is a valid RE2 expression,
// and length and choice bounds fit the type's caps and options. It expects
// fields already validated by the schema (types, names, options, min <=
// max). An error is Invalid and names the field at fault
// (fields[2].pattern).
func Compile(fields []*parleyv1.FormField) (*Schema, error) {
	if len(fields) > MaxFields {
		return nil, apperr.InvalidField("fields", "at most %d fields, not %d", MaxFields, len(fields))
	}
	s := &Schema{byName: make(map[string]int, len(fields))}
	work := 0 // the patterns' MaxPatternWork so far
	for i, f := range fields {
		at := fmt.Sprintf("fields[%d]", i)
		if _, dup := s.byName[f.GetName()]; dup {
			return nil, apperr.InvalidField("fields", "field names must be unique; %q is repeated", f.GetName())
		}
		cf := field{FormField: f, minLen: -1, maxLen: -1}
		if p := f.GetPattern(); p != "" {
			re, err := regexp.Compile(`^(?:` + p + `)$`)
			if err != nil {
				return nil, apperr.InvalidField(at+".pattern", "not a valid RE2 regular expression: %v", err)
			}
			cf.pattern, cf.patternSize = re, patternSize(p)
		}
		switch t := f.GetType(); t {
		case Text, Textarea, Email, Phone, URL:
			limit := maxLength[t]
			cf.maxLen = limit
			if f.Max != nil {
				if f.GetMax() > float64(limit) {
					return nil, apperr.InvalidField(at+".max", "%s values are at most %d characters", t, limit)
				}
				cf.maxLen = int(f.GetMax())
			}
			if f.Min != nil {
				if f.GetMin() > float64(cf.maxLen) {
					return nil, apperr.InvalidField(at+".min", "%s values are at most %d characters", t, cf.maxLen)
				}
				cf.minLen = int(f.GetMin())
			}
		case Select, Multiselect:
			cf.options = make(map[string]bool, len(f.GetOptions()))
			for _, o := range f.GetOptions() {
				cf.options[o] = true
			}
			if t == Multiselect {
				n := len(f.GetOptions())
				cf.maxLen = n
				if f.Max != nil {
					cf.maxLen = min(n, int(f.GetMax()))
				}
				if f.Min != nil {
					if f.GetMin() > float64(n) {
						return nil, apperr.InvalidField(at+".min", "more than the %d options", n)
					}
					cf.minLen = int(f.GetMin())
				}
			}
		case Number:
			if (f.Min != nil && !finite(f.GetMin())) || (f.Max != nil && !finite(f.GetMax())) {
				return nil, apperr.InvalidField(at, "min and max must be finite numbers")
			}
		}
		if cf.pattern != nil {
			// SECURITY: anyone may submit a published form; what its
			// patterns cost to match is bounded when it is made.
			if work += cf.patternSize * cf.maxLen; work > MaxPatternWork {
				return nil, apperr.InvalidField(at+".pattern", "too complex for the form: its patterns' sizes (%d here) times their fields' longest values come to more than %d; simplify the pattern or lower max (counted repetitions such as {500} multiply what they repeat)", cf.patternSize, MaxPatternWork)
			}
		}
		s.byName[f.GetName()] = i
		s.fields = append(s.fields, cf)
	}
	return s, nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// MarshalFields is the stored form of fields: a JSON array of
// parley.v1.FormField objects.
func MarshalFields(fields []*parleyv1.FormField) ([]byte, error) {
	raw := make([]json.RawMessage, 0, len(fields))
	for _, f := range fields {
		b, err := protojson.Marshal(f)
		if err != nil {
			return nil, err
		}
		raw = append(raw, b)
	}
	return json.Marshal(raw)
}

// UnmarshalFields reads fields stored by MarshalFields.
func UnmarshalFields(b []byte) ([]*parleyv1.FormField, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("stored form fields: %w", err)
	}
	out := make([]*parleyv1.FormField, 0, len(raw))
	for _, r := range raw {
		f := &parleyv1.FormField{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(r, f); err != nil {
			return nil, fmt.Errorf("stored form field: %w", err)
		}
		if f.Options == nil {
			f.Options = []string{}
		}
		out = append(out, f)
	}
	return out, nil
}

// MaxPatternWork bounds what matching a form's patterns may cost: the sum,
// over its fields, of the pattern's size (instructions of its compiled
// program) times the field's longest value (max, else its type's cap).
// Matching costs up to the program's size for every character: anyone may
// submit a published form, and (?:.*){999} forty times over, 440
// characters that RE2 accepts, took 18 s of CPU to match a 10,000-character
// textarea. Patterns of usual shape are far within it: an email's
// ([a-z0-9._%+-]{1,64}@[a-z0-9.-]{1,255}\.[a-z]{2,24}, 688) on an email
// field (254) is 175,000; .{0,1000} (2,004) on a text field (1,000),
// 2,004,000, just past. At the bound, the costliest shape measured,
// (?:.*){90} (184) on a 10,000-character value, takes 35 ms to match.
// A form stored before the bound that passes it refuses submissions, naming
// the pattern, until its owner simplifies it.
const MaxPatternWork = 2_000_000

// patternSize is the instructions of p's compiled program, as regexp
// compiles it (p compiled already, so it parses).
func patternSize(p string) int {
	re, err := syntax.Parse(`^(?:`+p+`)$`, syntax.Perl)
	if err != nil {
		return 0
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0
	}
	return len(prog.Inst)
}
