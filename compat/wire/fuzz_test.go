package wire

import (
	"testing"

	"buf.build/go/protovalidate"

	"github.com/parleyhq/parley/backend/apperr"
)

// Decoding and validating any body ends in a request or an Invalid error
// (400): never a panic, never another kind of error.
func FuzzDecodeAgentBodies(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","instructions":"b"}`,
		`{"name":"a","instructions":"b","model":"gpt-4o","temperature":0.5,"tools":["web_search"],"visibility":"public"}`,
		`{"temperature":"x"}`, `{"tools":[1,2]}`, `[]`, `null`, `{"name":null}`, `{"a":1}`, `{"name":"\u0000"}`,
		`{"datastores":[]}`, `{"id":"x","createdAt":5,"stats":{}}`, `{`, ``, `1e999`, `{"temperature":1e400}`,
		`{"toolSettings":{"http_request":{"endpoints":[{"name":"orders","method":"POST","url":"https://api.example.com/o","headers":{"X-Key":"k"}}]}}}`,
		`{"toolSettings":{"http_request":null}}`, `{"toolSettings":{"httpRequest":{}}}`, `{"toolSettings":{"http_request":{"endpoints":[{"headers":{"":"\r\n"}}]}}}`,
	} {
		f.Add([]byte(s))
	}
	v := fuzzValidator(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(err error) {
			if err != nil && apperr.CodeOf(err) != apperr.Invalid {
				t.Fatalf("body %q: error %v is not Invalid", body, err)
			}
		}
		create, err := DecodeCreateAgent(body)
		check(err)
		if err == nil {
			check(Validate(v, create))
		}
		update, err := DecodeUpdateAgent("id", body)
		check(err)
		if err == nil {
			check(Validate(v, update))
		}
	})
}

func fuzzValidator(f *testing.F) protovalidate.Validator {
	v, err := protovalidate.New()
	if err != nil {
		f.Fatal(err)
	}
	return v
}
