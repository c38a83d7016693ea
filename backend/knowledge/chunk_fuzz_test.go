package knowledge

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/parleyhq/parley/backend/llm"
)

// FuzzChunk checks Chunk's promises on any text: each piece is a run of
// its section's text (trimmed), valid UTF-8 when the text is, of at most
// MaxTokens; pieces follow the text in order, and nothing but whitespace
// falls between them.
func FuzzChunk(f *testing.F) {
	f.Add("Hello world. This is a test.\n\nAnother paragraph! And more? Yes.", uint8(8), uint8(3))
	f.Add(strings.Repeat("東京🎉", 40)+" end", uint8(5), uint8(2))
	f.Add(strings.Repeat("\U000E0041", 50), uint8(3), uint8(1))
	f.Add("a \xff\xfe b. c\r\nd", uint8(2), uint8(0))
	f.Fuzz(func(t *testing.T, text string, maxT, overlap uint8) {
		opt := ChunkOptions{MaxTokens: 1 + int(maxT)%64, OverlapTokens: int(overlap) % 64}
		pieces := Chunk(Document{Sections: []Section{{Heading: "H", Text: text}}}, opt)
		// The places the pieces so far may have been cut from: where the
		// last starts and how far the text is covered. A piece's text may
		// occur more than once (repeated text), hence several.
		type place struct{ from, covered int }
		places := map[place]bool{{}: true}
		for _, p := range pieces {
			if p.Text == "" || p.Text != strings.TrimSpace(p.Text) {
				t.Fatalf("piece %q is empty or not trimmed", p.Text)
			}
			if utf8.ValidString(text) && !utf8.ValidString(p.Text) {
				t.Fatalf("piece %q is not UTF-8", p.Text)
			}
			if p.Tokens > opt.MaxTokens && utf8.RuneCountInString(p.Text) > 1 {
				t.Fatalf("piece %q of %d tokens > %d", p.Text, p.Tokens, opt.MaxTokens)
			}
			// Trimmed, a piece may count a token more at each end than
			// its units did (" alba" is one token, "alba" two).
			if n := llm.CountTokens(p.Text); n > opt.MaxTokens+2 && utf8.RuneCountInString(p.Text) > 1 {
				t.Fatalf("piece %q counts %d tokens > %d", p.Text, n, opt.MaxTokens)
			}
			next := map[place]bool{}
			for pl := range places {
				for i := pl.from; i <= len(text); i++ {
					j := strings.Index(text[i:], p.Text)
					if j < 0 {
						break
					}
					i += j
					if i > pl.covered && strings.TrimSpace(text[pl.covered:i]) != "" {
						break // text between this piece and the last lost
					}
					next[place{i, max(pl.covered, i+len(p.Text))}] = true
				}
			}
			if len(next) == 0 {
				t.Fatalf("piece %q is not the text's next part", p.Text)
			}
			places = next
		}
		for pl := range places {
			if strings.TrimSpace(text[pl.covered:]) == "" {
				return
			}
		}
		t.Fatalf("text lost at the end: %d pieces", len(pieces))
	})
}
