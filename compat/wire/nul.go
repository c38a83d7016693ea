package wire

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/parleyhq/parley/backend/apperr"
)

// MaxDepth bounds how deeply a request's messages may nest: a JSON object
// or array in a google.protobuf.Struct (custom fields, form values) is two
// messages deep, so 64 allows about 30 levels of JSON in such a field, far
// more than any needs. Deeper is refused before anything else reads the
// request: JSON and protobuf decoders allow 10,000 levels, and every walk
// over the message grows with its depth (protovalidate's took 0.1 s for a
// 64 KiB chat request of 9,000 levels; these checks, building each path
// as they went, took 2 s: quadratic, and open to a public agent's visitor).
const MaxDepth = 64

// NoNUL refuses a request carrying U+0000 in any string, at any depth
// (names, contact fields, custom fields, text datasources, attachments):
// Postgres cannot store it in text, and a request must fail at the edge
// with the field named, not later with a database error. The error names
// the first such field by its JSON path. A request nested deeper than
// MaxDepth is refused too, naming where.
func NoNUL(msg proto.Message) error {
	return check(msg, hasNUL, "must not contain NUL characters (U+0000)")
}

// ValidUTF8 refuses a request carrying a string that is not valid UTF-8,
// at any depth, for the same reason as NoNUL: Postgres refuses it in text
// (SQLSTATE 22021). Binary protobuf already refuses it in proto3 strings,
// but a message built from a form, a multipart part or a header is not
// decoded by protobuf. The error names the first such field; a request
// nested deeper than MaxDepth is refused too.
func ValidUTF8(msg proto.Message) error {
	return check(msg, notUTF8, "must be valid UTF-8")
}

func hasNUL(s string) bool  { return strings.ContainsRune(s, 0) }
func notUTF8(s string) bool { return !utf8.ValidString(s) }

func check(msg proto.Message, bad func(string) bool, problem string) error {
	trail, deep, found := scan(msg.ProtoReflect(), 0, bad)
	if !found {
		return nil
	}
	// The trail runs from the string found out to the message: its path
	// is built once, here, so the walk stays linear however deep it goes.
	var b strings.Builder
	for i := len(trail) - 1; i >= 0; i-- {
		b.WriteString(trail[i])
	}
	path := strings.TrimPrefix(b.String(), ".")
	if deep {
		return apperr.InvalidField(path, "nests too deeply: a request nests at most %d messages, and each JSON object or array in a free-form field counts as two", MaxDepth)
	}
	return apperr.InvalidField(path, "%s", problem)
}

// scan finds the first string (a value or a map key) of m for which bad is
// true, or the first message deeper than MaxDepth (deep), and returns its
// path as segments (".name", "[i]", ".key"), innermost first.
func scan(m protoreflect.Message, depth int, bad func(string) bool) (trail []string, deep, found bool) {
	if depth > MaxDepth {
		return nil, true, true
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if trail, deep, found = value(fd, l.Get(i), depth, bad); found {
					trail = append(trail, "["+strconv.Itoa(i)+"]")
					break
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind && bad(k.String()) {
					found = true // named by the map's field alone
					return false
				}
				if trail, deep, found = value(fd.MapValue(), mv, depth, bad); found {
					trail = append(trail, keySegment(k.String()))
				}
				return !found
			})
		default:
			trail, deep, found = value(fd, v, depth, bad)
		}
		if found && !jsonValue[m.Descriptor().FullName()] {
			trail = append(trail, "."+fd.JSONName())
		}
		return !found
	})
	return trail, deep, found
}

// keySegment is a map key's part of a path: .key, or, for a key JSONName
// would change (snake_case, quotes), ["key"] as protovalidate names map
// keys, which JSONName keeps as the client sent it.
func keySegment(k string) string {
	if strings.ContainsAny(k, "_\"\\") {
		return "[" + strconv.Quote(k) + "]"
	}
	return "." + k
}

// jsonValue are the messages that carry free-form JSON (custom fields,
// form values): their fields are not in the JSON a client sent, so a path
// through them names its keys and indexes alone (customFields.a[0], not
// customFields.fields.a.listValue.values[0]).
var jsonValue = map[protoreflect.FullName]bool{
	"google.protobuf.Struct":    true,
	"google.protobuf.Value":     true,
	"google.protobuf.ListValue": true,
}

func value(fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int, bad func(string) bool) ([]string, bool, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return nil, false, bad(v.String())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return scan(v.Message(), depth+1, bad)
	}
	return nil, false, false
}
