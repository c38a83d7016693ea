package form

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/cache"
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
	work, insts := 0, 0 // the patterns' MaxPatternWork and MaxPatternInstructions so far
	for i, f := range fields {
		at := fmt.Sprintf("fields[%d]", i)
		if _, dup := s.byName[f.GetName()]; dup {
			return nil, apperr.InvalidField("fields", "field names must be unique; %q is repeated", f.GetName())
		}
		cf := field{FormField: f, minLen: -1, maxLen: -1}
		if p := f.GetPattern(); p != "" {
			n, err := patternSize(p)
			if err != nil {
				return nil, apperr.InvalidField(at+".pattern", "not a valid RE2 regular expression: %v", err)
			}
			// SECURITY: compiling costs the program's size too, whatever
			// the values: bounded before regexp compiles it.
			if insts += n; insts > MaxPatternInstructions {
				return nil, apperr.InvalidField(at+".pattern", "too complex for the form: its patterns compile to more than %d instructions (%d here; counted repetitions such as {500} multiply what they repeat)", MaxPatternInstructions, n)
			}
			cf.patternSize = n
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
		if p := f.GetPattern(); p != "" {
			// SECURITY: anyone may submit a published form; what its
			// patterns cost to match is bounded when it is made. A field
			// counts at least one character (max 0 still runs the pattern
			// on the empty value).
			if work += cf.patternSize * max(cf.maxLen, 1); work > MaxPatternWork {
				return nil, apperr.InvalidField(at+".pattern", "too complex for the form: its patterns' sizes (%d here) times their fields' longest values come to more than %d; simplify the pattern or lower max (counted repetitions such as {500} multiply what they repeat)", cf.patternSize, MaxPatternWork)
			}
			re, err := regexp.Compile(`^(?:` + p + `)$`)
			if err != nil { // patternSize parsed it: not expected
				return nil, apperr.InvalidField(at+".pattern", "not a valid RE2 regular expression: %v", err)
			}
			cf.pattern = re
		}
		s.byName[f.GetName()] = i
		s.fields = append(s.fields, cf)
	}
	return s, nil
}

// schemas keeps compiled schemas by the SHA-256 of their stored fields. A
// schema is a function of its fields alone, so an entry is never stale, and
// one organization's form can share another's entry only by having the
// same fields. Submissions then compile a form once per version of its
// fields, not every time: anyone may submit a published form.
var schemas = cache.New[[32]byte, *Schema](time.Hour, 1024)

// StoredSchema is the Schema of fields stored by MarshalFields.
func StoredSchema(stored []byte) (*Schema, error) {
	return schemas.Get(sha256.Sum256(stored), func() (*Schema, error) {
		fields, err := UnmarshalFields(stored)
		if err != nil {
			return nil, err
		}
		return Compile(fields)
	})
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

// MaxPatternInstructions bounds the instructions of a form's patterns'
// compiled programs together. Compiling costs their size whatever the
// value matched, and a form's schema is compiled when it is saved and
// (unless cached) when it is submitted to: (.{1000}) sixty-two times over,
// 434 characters, is 62,000 instructions, 75 ms and 18 MB to compile, and
// fifty such fields on a form with max 0 passed MaxPatternWork. Usual
// patterns are far within it: an email's (see MaxPatternWork) is 688, and
// fifty of them 34,400.
const MaxPatternInstructions = 50_000

// patternSize is the instructions of p's compiled program, as regexp
// compiles it, counted without compiling it (a large program costs its
// size to compile, and it is only compiled once it fits), or the reason p
// is not an RE2 expression.
func patternSize(p string) (int, error) {
	re, err := syntax.Parse(`^(?:`+p+`)$`, syntax.Perl)
	if err != nil {
		return 0, err
	}
	// The program's first two instructions: its failure and its match.
	return 2 + instructions(re.Simplify(), map[*syntax.Regexp]size{}).insts, nil
}

// instructions counts what syntax.Compile makes of re, simplified, and
// whether re matches the empty string (a star of such a thing compiles as
// (x+)?, one instruction more). A simplified repetition's copies are one
// shared subexpression, counted once (memo) and added for every use.
func instructions(re *syntax.Regexp, memo map[*syntax.Regexp]size) size {
	if n, ok := memo[re]; ok {
		return n
	}
	n := size{1, false} // a class, any character, a no-match
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		n.nullable = true
	case syntax.OpLiteral:
		n.insts = max(len(re.Rune), 1)
	case syntax.OpCapture, syntax.OpPlus:
		sub := instructions(re.Sub[0], memo)
		n = size{sub.insts + 1, sub.nullable}
		if re.Op == syntax.OpCapture {
			n.insts++
		}
	case syntax.OpQuest:
		n = size{1 + instructions(re.Sub[0], memo).insts, true}
	case syntax.OpStar:
		sub := instructions(re.Sub[0], memo)
		n = size{1 + sub.insts, true}
		if sub.nullable {
			n.insts++
		}
	case syntax.OpConcat:
		n = size{0, true}
		if len(re.Sub) == 0 {
			n.insts = 1
		}
		for _, r := range re.Sub {
			sub := instructions(r, memo)
			n.insts += sub.insts
			n.nullable = n.nullable && sub.nullable
		}
	case syntax.OpAlternate:
		n = size{len(re.Sub) - 1, false}
		for _, r := range re.Sub {
			sub := instructions(r, memo)
			n.insts += sub.insts
			n.nullable = n.nullable || sub.nullable
		}
	case syntax.OpRepeat: // Simplify leaves none; as many as it would make
		sub := instructions(re.Sub[0], memo)
		k := re.Max
		if k == -1 {
			k = re.Min + 1
		}
		n = size{k*sub.insts + 1, re.Min == 0 || sub.nullable}
	}
	memo[re] = n
	return n
}

// size is a subexpression's instructions, and whether it matches the
// empty string.
type size struct {
	insts    int
	nullable bool
}
