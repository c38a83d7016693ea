package tool

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// What the model (and the visitor's tool_call event) reads of arguments
// http_request cannot decode names JSON's kinds and the field, never Go's
// types.
func TestArgsProblemSpeaksJSON(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		`[1]`:                 "they are array, not an object",
		`{"endpoint":1}`:      "endpoint must be a string, not number",
		`{"query":{"a":[1]}}`: "query's values must be strings, not array",
		`{"query":"x"}`:       "query must be an object, not string",
		`{"endpoint":`:        "they are not valid JSON",
		`{"endpoint":"a",}`:   "they are not valid JSON",
		`{"url":"http://x/"}`: `unknown field "url"`,
	} {
		var v struct {
			Endpoint string            `json:"endpoint"`
			Query    map[string]string `json:"query"`
			Body     json.RawMessage   `json:"body"`
		}
		dec := json.NewDecoder(strings.NewReader(args))
		dec.DisallowUnknownFields()
		got := argsProblem(dec.Decode(&v))
		require.Equal(t, want, got, args)
		require.NotContains(t, got, "Go ", args)
	}
}
