package wire

import (
	"bytes"
	"strings"
	"testing"

	sse "github.com/tmaxmax/go-sse"

	"github.com/parleyhq/parley/backend/apperr"
)

// Whatever the data, a framed event reads back, with an SSE parser, as one
// event of the same name carrying the same data (line ends normalised to \n).
func FuzzFrame(f *testing.F) {
	for _, s := range []string{"", "hello", "a\nb", "a\r\nb\rc", "data: x", "\n\n", ":comment", `{"type":"token","value":"hi"}`, "[DONE]", "50%25%20off"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if strings.ContainsRune(data, 0) {
			t.Skip("NUL is not text")
		}
		for _, name := range []string{"", "answer", "endpoint_response"} {
			var got []sse.Event
			for ev, err := range sse.Read(bytes.NewReader(Frame(name, []byte(data))), nil) {
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				got = append(got, ev)
			}
			if len(got) != 1 {
				t.Fatalf("%d events from one frame of %q", len(got), data)
			}
			if want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(data); got[0].Data != want {
				t.Fatalf("data %q read back as %q", want, got[0].Data)
			}
			if got[0].Type != name {
				t.Fatalf("event %q read back as %q", name, got[0].Type)
			}
		}
	})
}

// Any chat body decodes to a request or to an Invalid error; validation of
// a decoded request never fails otherwise.
func FuzzDecodeChat(f *testing.F) {
	for _, s := range []string{
		`{"query":"hi","conversationId":"c"}`,
		`{"message":"hi","conversationId":"c","visitorId":"v","streaming":true,"channel":"web"}`,
		`{"query":"hi","conversationId":"c","contact":{"email":"a@b.co","phoneNumber":"+33612345678","customFields":{"a":[1,{"b":null}]}}}`,
		`{"query":"hi","conversationId":"c","attachments":[{"url":"https://x.test/a.png","type":"image/png","size":3}]}`,
		`{"query":1}`, `{"contact":[]}`, `{"attachments":{}}`, `[]`, `"x"`, `{"streaming":"true"}`, `{"filters":{"datasourceIds":[1]}}`,
		`{"temperature":"hot","modelName":5}`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	v := fuzzValidator(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _, err := DecodeChat("agent", body)
		if err != nil {
			if apperr.CodeOf(err) != apperr.Invalid {
				t.Fatalf("decode %q: %v is not Invalid", body, err)
			}
			return
		}
		if err := Validate(v, req); err != nil && apperr.CodeOf(err) != apperr.Invalid {
			t.Fatalf("validate %q: %v is not Invalid", body, err)
		}
	})
}
