package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/parleyhq/parley/backend/apperr"
)

// ReadBody reads at most MaxBodyBytes of a request body.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return ReadBodyMax(w, r, MaxBodyBytes)
}

// ReadBodyMax reads at most limit bytes of a request body; a larger one is
// TooLarge (413) naming the field body.
func ReadBodyMax(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, &apperr.Error{Code: apperr.TooLarge, Field: "body", Message: fmt.Sprintf("body: larger than the %d bytes allowed", limit)}
	}
	if err != nil {
		return nil, apperr.InvalidField("body", "could not be read")
	}
	return body, nil
}

// DecodeStrict decodes a JSON object into v, refusing unknown fields, wrong
// types, trailing data and anything that is not one object. Its errors are
// Invalid and name the field.
func DecodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return apperr.InvalidField("body", "empty; send a JSON object")
	}
	if err := CheckText(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return JSONError(body, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return apperr.InvalidField("body", "must hold a single JSON object")
	}
	return duplicateKey(body, reflect.TypeOf(v))
}

// duplicateKey refuses an object, at any depth, that names a key twice:
// encoding/json keeps the last silently, where Connect's decoder (and so
// the same request over Connect) refuses it, and a proxy or log reading
// the first would see another request than the one served. So is a key
// of one of t's structs written in another case ("TEXT" for "text"):
// encoding/json takes it for the field, the last of the two winning
// again, where Connect's decoder refuses it as unknown. body has decoded
// into a t already: it is valid JSON.
func duplicateKey(body []byte, t reflect.Type) error {
	w := newWalker(body)
	w.root = structOf(t)
	for {
		ev, again := w.next()
		switch {
		case ev == walkDone:
			return nil
		case ev == walkKey && again:
			return apperr.InvalidField(w.path().String(), "named twice in one object")
		case ev == walkKey && w.unknown:
			return apperr.InvalidField(w.path().String(), "unknown field (field names are case-sensitive)")
		}
	}
}

// structOf is the struct type whose fields, as their json tags spell them,
// case included, name the keys of a JSON object decoded into a t (through
// pointers, slices and arrays), or nil when any key does: a map, an any, a
// json.RawMessage (free-form JSON) or a type that reads itself.
func structOf(t reflect.Type) reflect.Type {
	for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(unmarshaler) {
		return nil // free-form, or read by its own UnmarshalJSON
	}
	return t
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// jsonFields holds, for each struct type jsonField was asked about, the
// types of its fields by the names encoding/json gives them: a body
// checks every key it holds.
var jsonFields sync.Map // reflect.Type → map[string]reflect.Type

// jsonField is the type of t's field that encoding/json names name, case
// included.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	fields, ok := jsonFields.Load(t)
	if !ok {
		m := map[string]reflect.Type{}
		for _, f := range reflect.VisibleFields(t) {
			if !f.IsExported() || f.Anonymous && f.Type.Kind() == reflect.Struct {
				continue
			}
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag == "-" && f.Tag.Get("json") == "-" {
				continue
			}
			if tag == "" {
				tag = f.Name
			}
			if _, named := m[tag]; !named {
				m[tag] = f.Type
			}
		}
		fields, _ = jsonFields.LoadOrStore(t, m)
	}
	ft, ok := fields.(map[string]reflect.Type)[name]
	return ft, ok
}

// CheckText refuses a JSON body holding text that is not valid UTF-8: bytes
// that are not UTF-8, or a \u escape of a lone UTF-16 surrogate (\ud800 not
// followed by \udc00-\udfff, or \udc00 alone), which no UTF-8 text can
// hold. It must run before encoding/json, which silently turns both into
// U+FFFD: the request would be stored changed instead of refused, as
// Connect's decoders refuse it.
func CheckText(body []byte) error {
	if !utf8.Valid(body) {
		return bodyNotUTF8()
	}
	// A backslash outside a string is a syntax error the decoder reports;
	// inside one it starts an escape, whose next byte is never the start
	// of another escape (so "\\ud800" is a backslash and text, not an
	// escape).
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		i++ // the escaped byte
		if i >= len(body) || body[i] != 'u' {
			continue
		}
		r, ok := hex4(body[i+1:])
		if !ok || !utf16.IsSurrogate(r) {
			continue // not a surrogate, or malformed (the decoder says so)
		}
		i += 4 // the escape's last digit
		if r >= 0xdc00 {
			return bodyNotUTF8() // a low surrogate with no high one before it
		}
		next := body[i+1:]
		if len(next) < 2 || next[0] != '\\' || next[1] != 'u' {
			return bodyNotUTF8() // a high surrogate with no escape after it
		}
		low, ok := hex4(next[2:])
		if !ok || low < 0xdc00 || low > 0xdfff {
			return bodyNotUTF8() // a high surrogate with no low one after it
		}
		i += 6 // the pair's second half
	}
	return nil
}

func bodyNotUTF8() error {
	return apperr.InvalidField("body", "holds text that is not valid UTF-8 (bytes that are not UTF-8, or a \\u escape of a lone surrogate)")
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n), err == nil
}

// JSONError is the Invalid error, naming the field, of decoding body into
// a Go value.
func JSONError(body []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return apperr.InvalidField("body", "malformed JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return apperr.InvalidField("body", "must be a JSON object, not %s", typ.Value)
		}
		field := typ.Field
		if p, ok := pathAt(body, typ.Offset); ok && strings.EqualFold(strings.Join(p.names, "."), field) {
			field = p.String()
		}
		want := describe(typ.Type.String())
		if want == "a number" && strings.HasPrefix(typ.Value, "number") {
			// A number, but past what a 64-bit float holds (1e309): say
			// so, rather than "must be a number, not number 1e309".
			want = "a number from -1.7976931348623157e308 to 1.7976931348623157e308"
		}
		return apperr.InvalidField(field, "must be %s, not %s", want, typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apperr.InvalidField("body", "malformed JSON: unexpected end")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field := strings.Trim(name, `"`)
		if field == "" {
			// An error must name a field; a key "" names none.
			return apperr.InvalidField("body", "unknown field \"\"")
		}
		return apperr.InvalidField(field, "unknown field")
	}
	return apperr.InvalidField("body", "malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// describe names the JSON a Go type takes, as a client knows it (never a
// Go type's name).
func describe(goType string) string {
	switch strings.TrimLeft(goType, "*") {
	case "string":
		return "a string"
	case "float64", "float32":
		return "a number"
	case "int32", "uint32":
		return "a whole number that fits in 32 bits"
	case "int", "int64", "uint", "uint64":
		return "a whole number"
	case "bool":
		return "a boolean"
	case "[]string":
		return "an array of strings"
	}
	if strings.HasPrefix(goType, "[]") {
		return "an array"
	}
	return "an object"
}

// MaxMessageBytes bounds a Connect or gRPC request message.
const MaxMessageBytes = 1 << 20

// MaxBodyBytes bounds a REST JSON body (documented in openapi.json): the
// Connect message's bound, as a body carries the same message. Any less
// refused values the schema allows once a client writes them escaped, as
// Python's json does by default (\u4e2d, six bytes a character): a chat
// query of 32,000 characters, an agent's 20,000 characters of
// instructions or a form's 50 fields of 10,000 characters. A datasource's
// upload has a bound of its own.
const MaxBodyBytes = MaxMessageBytes

// jsonPath is where a value is in a JSON document: its keys (names) and,
// in String, the index of each array item on the way.
type jsonPath struct {
	names []string
	segs  []string
}

func (p jsonPath) String() string { return strings.TrimPrefix(strings.Join(p.segs, ""), ".") }

// pathAt returns the path of the first value of body that ends at or after
// offset, where encoding/json reports a value of the wrong type. Its
// UnmarshalTypeError names the field without the index of the array item
// it is in (attachments.size, not attachments[1].size): a client with
// several could not tell which one is refused.
func pathAt(body []byte, offset int64) (jsonPath, bool) {
	w := newWalker(body)
	for {
		switch ev, _ := w.next(); ev {
		case walkDone:
			return jsonPath{}, false
		case walkValue:
			if w.dec.InputOffset() >= offset {
				return w.path(), true
			}
		}
	}
}

// walker reads a JSON document token by token, knowing the path to where
// it is: pathAt and duplicateKey walk with it.
type walker struct {
	dec   *json.Decoder
	stack []*frame
	// root is the struct type the document decodes into, if any: keys
	// are checked against its fields (see structOf), frame by frame, so
	// that the walk stays linear however deep the document goes.
	root reflect.Type
	// unknown is true for a key that names no field of its object's
	// struct type.
	unknown bool
	// opened is the object or array whose value started last: it is
	// entered on the next token, so that the value's path is its parent's.
	opened *frame
}

type frame struct {
	array   bool
	index   int
	key     string
	wantKey bool
	keys    map[string]bool // an object's keys so far
	// t is the struct type an object's keys must name, or an array's
	// items decode into (see structOf); nil takes any key. keyT is the
	// struct type of the value of the object's last key.
	t, keyT reflect.Type
}

type walkEvent int

const (
	walkDone  walkEvent = iota // the end, or a token that cannot be read
	walkKey                    // an object's key, now the path's last
	walkValue                  // a value starts, at the path
	walkOther                  // an object or array ends
)

func newWalker(body []byte) *walker {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	return &walker{dec: dec}
}

// next reads a token and says what it was; again is true for a key its
// object named before.
func (w *walker) next() (ev walkEvent, again bool) {
	if w.opened != nil {
		w.stack, w.opened = append(w.stack, w.opened), nil
	}
	tok, err := w.dec.Token()
	if err != nil {
		return walkDone, false
	}
	var top *frame
	if len(w.stack) > 0 {
		top = w.stack[len(w.stack)-1]
	}
	if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
		w.stack = w.stack[:len(w.stack)-1]
		if len(w.stack) > 0 && !w.stack[len(w.stack)-1].array {
			w.stack[len(w.stack)-1].wantKey = true
		}
		return walkOther, false
	}
	if top != nil && !top.array && top.wantKey {
		key, _ := tok.(string) // the decoder takes only strings as keys
		again = top.keys[key]
		top.keys[key] = true
		top.key, top.wantKey = key, false
		top.keyT, w.unknown = nil, false
		if top.t != nil {
			ft, ok := jsonField(top.t, key)
			top.keyT, w.unknown = structOf(ft), !ok
		}
		return walkKey, again
	}
	// A value starts: an array's next item, or an object's key's.
	if top != nil && top.array {
		top.index++
	}
	t := w.root
	switch {
	case top != nil && top.array:
		t = top.t
	case top != nil:
		t = top.keyT
	}
	switch tok {
	case json.Delim('{'):
		w.opened = &frame{wantKey: true, keys: map[string]bool{}, t: t}
	case json.Delim('['):
		w.opened = &frame{array: true, index: -1, t: t}
	default:
		if top != nil && !top.array {
			top.wantKey = true
		}
	}
	return walkValue, false
}

// path is where the walk is: the key just read, or the value that started.
func (w *walker) path() jsonPath {
	var p jsonPath
	for _, f := range w.stack {
		if f.array {
			p.segs = append(p.segs, "["+strconv.Itoa(f.index)+"]")
		} else {
			p.names = append(p.names, f.key)
			p.segs = append(p.segs, "."+f.key)
		}
	}
	return p
}
