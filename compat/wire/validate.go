package wire

import (
	"errors"
	"strings"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

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
		field := JSONName(protovalidate.FieldPathString(v.Proto.GetField()))
		if i == 0 {
			first = field
		}
		msgs = append(msgs, field+": "+v.Proto.GetMessage())
	}
	return &apperr.Error{Code: apperr.Invalid, Field: first, Message: strings.Join(msgs, "; ")}
}

// restNames are the REST names that are not the lowerCamelCase of the
// schema's: toolSettings is keyed by tool names, which keep their
// snake_case (as in tools).
var restNames = strings.NewReplacer("toolSettings.httpRequest", "toolSettings.http_request")

// JSONName turns a protobuf field path (update_mask, tools[1]) into its
// REST JSON form: lowerCamelCase (toolSettings.http_request.endpoints[0].url).
func JSONName(path string) string {
	return restNames.Replace(camel(path))
}

func camel(path string) string {
	var b strings.Builder
	up := false
	for _, c := range path {
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
