package llm

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzLocal checks the offline engine on any question and passage: it
// answers (text, then usage), every streamed piece is UTF-8 when its
// inputs are, and the answer is made of the passage's text (or the
// engine's own sentences), never longer than the passage allows.
func FuzzLocal(f *testing.F) {
	f.Add("How much is the Pro plan?", "The Pro plan costs $19.99 per month. Docs at docs.example.com.\nShipping options:\n- Express\n- Standard", 0.0)
	f.Add("营业时间", "营业时间是上午九点到下午五点.价格是19.99元.请联系我们!", 0.5)
	f.Add("my name is Ann, email ann@example.com, phone +33 6 12 34 56 78", "Mr. Smith e.g. 1. Open the app.", 0.4)
	f.Add("talk to a human", "é e\u0301 \xff.", 0.0)
	f.Fuzz(func(t *testing.T, question, passage string, similarity float64) {
		req := Request{
			Messages:  []Message{{Role: RoleUser, Content: question}},
			Knowledge: []Passage{{Source: "S", Text: passage, Similarity: similarity}},
		}
		var b strings.Builder
		usage := false
		err := Local{}.Stream(context.Background(), req, func(ev Event) error {
			if usage {
				t.Fatalf("an event after the usage: %+v", ev)
			}
			if ev.Usage != nil {
				usage = true
			}
			if utf8.ValidString(question) && utf8.ValidString(passage) && !utf8.ValidString(ev.Text) {
				t.Fatalf("token %q is not UTF-8", ev.Text)
			}
			b.WriteString(ev.Text)
			return nil
		})
		if err != nil || !usage {
			t.Fatalf("err %v, usage %v", err, usage)
		}
		if answer := b.String(); answer != NoKnowledgeAnswer && len(answer) > 2*len(passage)+len(question)+400 {
			t.Fatalf("an answer of %d bytes from a passage of %d", len(answer), len(passage))
		}
	})
}
