package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/parleyhq/parley/backend/apperr"
)

// ReadBody reads at most MaxBodyBytes of a request body.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, apperr.InvalidField("body", "larger than the %d bytes allowed", MaxBodyBytes)
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
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return JSONError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return apperr.InvalidField("body", "must hold a single JSON object")
	}
	return nil
}

func JSONError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return apperr.InvalidField("body", "malformed JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return apperr.InvalidField("body", "must be a JSON object, not %s", typ.Value)
		}
		return apperr.InvalidField(typ.Field, "must be %s, not %s", describe(typ.Type.String()), typ.Value)
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

func describe(goType string) string {
	switch strings.TrimLeft(goType, "*") {
	case "string":
		return "a string"
	case "float64", "float32", "int", "int32", "int64":
		return "a number"
	case "bool":
		return "a boolean"
	case "[]string":
		return "an array of strings"
	}
	if strings.HasPrefix(goType, "[]") {
		return "an array"
	}
	return fmt.Sprintf("an object (%s)", goType)
}

// MaxBodyBytes bounds a management request body (documented in openapi.json).
const MaxBodyBytes = 64 << 10
