package wire

import (
	"errors"
	"strings"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/parleyhq/parley/backend/apperr"
)

// Validate runs the schema's protovalidate rules, as the Connect interceptor
// does, and names the first field at fault in its REST (camelCase) form.
// Strings that are not valid UTF-8 are refused first: the schema's rules
// do not check it, and Postgres refuses them.
func Validate(v protovalidate.Validator, msg proto.Message) error {
	if err := ValidUTF8(msg); err != nil {
		return err
	}
	err := v.Validate(msg)
	if err == nil {
		return NoNUL(msg)
	}
	var verr *protovalidate.ValidationError
	if !errors.As(err, &verr) || len(verr.Violations) == 0 {
		return err
	}
	msgs := make([]string, 0, len(verr.Violations))
	var first string
	for i, v := range verr.Violations {
		named := nameRuleField(msg, v)
		field := JSONName(protovalidate.FieldPathString(v.Proto.GetField()))
		if i == 0 {
			first = field
		}
		text := v.Proto.GetMessage()
		if field == "" {
			msgs = append(msgs, text) // a rule on the whole message, about no one field
			continue
		}
		if named != nil && strings.HasPrefix(text, string(named.Name())+" ") {
			// A rule on the whole message about one field, whose message
			// names it (max_pages is ...): as a REST client knows it.
			msgs = append(msgs, field+strings.TrimPrefix(text, string(named.Name())))
			continue
		}
		msgs = append(msgs, field+": "+text)
	}
	return &apperr.Error{Code: apperr.Invalid, Field: first, Message: strings.Join(msgs, "; ")}
}

// NameRuleFields returns v, whose violations of a rule on the validated
// message itself name the field the rule is about, as Validate's do (see
// nameRuleField). Given to the Connect interceptor
// (validate.WithValidator), it makes both fronts name the same field.
func NameRuleFields(v protovalidate.Validator) protovalidate.Validator { return ruleFields{v} }

type ruleFields struct{ protovalidate.Validator }

func (r ruleFields) Validate(msg proto.Message, opts ...protovalidate.ValidationOption) error {
	err := r.Validator.Validate(msg, opts...)
	var verr *protovalidate.ValidationError
	if errors.As(err, &verr) {
		for _, v := range verr.Violations {
			nameRuleField(msg, v)
		}
	}
	return err
}

// nameRuleField gives a violation of a message-level rule of msg, which
// protovalidate reports with no field, the field the rule is about, and
// returns it: the schema's convention is a rule id <message>.<field> whose
// last part is a field of msg (datasource.text is about text), with a
// message that names the field. A rule about several fields or none
// (update.some_field) keeps no field, and rules of nested messages keep
// theirs (fields[2]). A violation NameRuleFields named already returns its
// field again.
func nameRuleField(msg proto.Message, v *protovalidate.Violation) protoreflect.FieldDescriptor {
	id := v.Proto.GetRuleId()
	dot := strings.LastIndexByte(id, '.')
	if dot < 0 || v.Proto.GetForKey() {
		return nil
	}
	fd := msg.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(id[dot+1:]))
	if fd == nil {
		return nil
	}
	switch path := v.Proto.GetField().GetElements(); {
	case len(path) == 0:
		v.Proto.SetField(validate.FieldPath_builder{Elements: []*validate.FieldPathElement{
			validate.FieldPathElement_builder{
				FieldNumber: proto.Int32(int32(fd.Number())),
				FieldName:   proto.String(string(fd.Name())),
				FieldType:   descriptorpb.FieldDescriptorProto_Type(fd.Kind()).Enum(),
			}.Build(),
		}}.Build())
		v.FieldDescriptor = fd
		return fd
	case len(path) == 1 && path[0].GetFieldNumber() == int32(fd.Number()):
		return fd
	}
	return nil
}

// restNames are the REST names that are not the lowerCamelCase of the
// schema's: toolSettings is keyed by tool names, which keep their
// snake_case (as in tools).
var restNames = strings.NewReplacer("toolSettings.httpRequest", "toolSettings.http_request")

// JSONName turns a protobuf field path (update_mask, tools[1]) into its
// REST JSON form: lowerCamelCase (toolSettings.http_request.endpoints[0].url).
// A quoted map key (headers["X_Key"]) is the client's own and is kept as
// sent.
func JSONName(path string) string {
	return restNames.Replace(camel(path))
}

func camel(path string) string {
	var b strings.Builder
	up, quoted, escaped := false, false, false
	for _, c := range path {
		if quoted {
			// Inside a key strconv.Quote wrote: copied, up to its
			// closing quote (an escaped one does not close it).
			quoted = escaped || c != '"'
			escaped = !escaped && c == '\\'
			b.WriteRune(c)
			continue
		}
		if c == '"' {
			quoted = true
			up = false
			b.WriteRune(c)
			continue
		}
		if c == '_' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		b.WriteRune(c)
	}
	return b.String()
}
