package wire

import (
	"strings"

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
	if path, ok := findNUL(msg.ProtoReflect(), ""); ok {
		return apperr.InvalidField(path, "must not contain NUL characters (U+0000)")
	}
	return nil
}

func findNUL(m protoreflect.Message, prefix string) (string, bool) {
	var path string
	var found bool
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + fd.JSONName()
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if path, found = valueNUL(fd, l.Get(i), name+"["+itoa(i)+"]"); found {
					return false
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if strings.ContainsRune(k.String(), 0) {
					path, found = name, true
					return false
				}
				path, found = valueNUL(fd.MapValue(), mv, name+"."+k.String())
				return !found
			})
		default:
			path, found = valueNUL(fd, v, name)
		}
		return !found
	})
	return path, found
}

func valueNUL(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) (string, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return path, strings.ContainsRune(v.String(), 0)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return findNUL(v.Message(), path+".")
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
