package knowledge

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzMarkdown checks Markdown's sections on any text: each is a run of
// the text's lines (ending with LF, CRLF or CR), in order, none
// overlapping another, none blank; headings and the title are one line,
// of UTF-8 when the text is.
func FuzzMarkdown(f *testing.F) {
	f.Add("# Title\n\nSome text.\n\n## Part\n\n- item\n\n```\n# not a heading\n```\n")
	f.Add("Guide\n=====\n\nIntro.\n\nInstall\n-------\n\nRun it.\n\n7.12. How do I put a package\non hold?\n\nLike this.\n")
	f.Add("# Title\rText\r\rPart\r----\rMore\r\n")
	f.Add("Chapter 7. Basics\n\n1.2.3 Deep\n\n####### seven\n\ttabbed\n~~~\nfenced")
	f.Fuzz(func(t *testing.T, text string) {
		doc := Markdown(text)
		text = loneCRs(text) // a line's end, as Markdown reads the text
		at := 0
		for _, s := range doc.Sections {
			// The first place, at a line's start, where it occurs.
			i := strings.Index(text[at:], s.Text)
			for i >= 0 && at+i > 0 && text[at+i-1] != '\n' {
				j := strings.Index(text[at+i+1:], s.Text)
				if j < 0 {
					i = -1
					break
				}
				i += 1 + j
			}
			if i < 0 || strings.TrimSpace(s.Text) == "" {
				t.Fatalf("section %q is blank or not a run of the text's next lines", s.Text)
			}
			at += i + len(s.Text)
			if strings.ContainsAny(s.Heading, "\r\n") || utf8.ValidString(text) && !utf8.ValidString(s.Heading) {
				t.Fatalf("heading %q", s.Heading)
			}
		}
		if strings.ContainsAny(doc.Title, "\r\n") {
			t.Fatalf("title %q", doc.Title)
		}
	})
}
