package wire

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/parleyhq/parley/backend/apperr"
)

// NoNUL refuses a request carrying U+0000 in any string, at any depth
// (names, contact fields, custom fields, text datasources, attachments):
// Postgres cannot store it in text, and a request must fail at the edge
// with the field named, not later with a database error. The error names
// the first such field by its JSON path.
func NoNUL(msg proto.Message) error {
	if path, ok := findString(msg.ProtoReflect(), "", hasNUL); ok {
		return apperr.InvalidField(path, "must not contain NUL characters (U+0000)")
	}
	return nil
}

// ValidUTF8 refuses a request carrying a string that is not valid UTF-8,
// at any depth, for the same reason as NoNUL: Postgres refuses it in text
// (SQLSTATE 22021). Binary protobuf already refuses it in proto3 strings,
// but a message built from a form, a multipart part or a header is not
// decoded by protobuf. The error names the first such field.
func ValidUTF8(msg proto.Message) error {
	if path, ok := findString(msg.ProtoReflect(), "", notUTF8); ok {
		return apperr.InvalidField(path, "must be valid UTF-8")
	}
	return nil
}

func hasNUL(s string) bool  { return strings.ContainsRune(s, 0) }
func notUTF8(s string) bool { return !utf8.ValidString(s) }

// findString returns the JSON path of the first string (a value or a map
// key) for which bad is true.
func findString(m protoreflect.Message, prefix string, bad func(string) bool) (string, bool) {
	var path string
	var found bool
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + fd.JSONName()
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if path, found = value(fd, l.Get(i), name+"["+itoa(i)+"]", bad); found {
					return false
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind && bad(k.String()) {
					path, found = name, true
					return false
				}
				path, found = value(fd.MapValue(), mv, name+"."+k.String(), bad)
				return !found
			})
		default:
			path, found = value(fd, v, name, bad)
		}
		return !found
	})
	return path, found
}

func value(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string, bad func(string) bool) (string, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return path, bad(v.String())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return findString(v.Message(), path+".", bad)
	}
	return "", false
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
