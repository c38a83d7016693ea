package knowledge

import (
	"strings"
	"unicode/utf8"

	unorm "golang.org/x/text/unicode/norm"

	"github.com/parleyhq/parley/backend/llm"
)

// Section is a part of a document under one heading (or page, slide, sheet).
type Section struct {
	// Heading is the heading path, "Guide > Install".
	Heading string
	Text    string
	// Page is the page (or slide) number, 0 when unknown.
	Page int
}

// Document is extracted text with its structure.
type Document struct {
	Title    string
	URL      string
	Sections []Section
}

// Piece is one chunk of a document.
type Piece struct {
	Text     string
	Heading  string
	Page     int
	Position int
	Tokens   int
}

// ChunkOptions sizes chunks in tokens.
type ChunkOptions struct {
	MaxTokens     int
	OverlapTokens int
}

// DefaultChunkOptions: chunks of up to 300 tokens, consecutive chunks of a
// section sharing up to 50.
var DefaultChunkOptions = ChunkOptions{MaxTokens: 300, OverlapTokens: 50}

// composed is doc in Unicode's composed form (NFC), as a search's query is
// (EmbedQuery): an "é" written as "e" and a combining accent, as some PDFs
// and macOS files hold it, is another word than the "é" a visitor types,
// to Postgres' full-text search and to the embedders alike.
func composed(doc Document) Document {
	doc.Title = nfc(doc.Title)
	secs := make([]Section, len(doc.Sections))
	for i, s := range doc.Sections {
		s.Heading, s.Text = nfc(s.Heading), nfc(s.Text)
		secs[i] = s
	}
	doc.Sections = secs
	return doc
}

// nfc is s in Unicode's composed form; s itself when it is already.
func nfc(s string) string { return unorm.NFC.String(s) }

// Chunk cuts a document by its structure (sections, then paragraphs and
// sentences, then words for a sentence too long) into pieces of at most
// MaxTokens, each starting with up to OverlapTokens of the previous piece's
// end within the same section. No text is lost: every unit of the document
// is in at least one piece, in order.
func Chunk(doc Document, opt ChunkOptions) []Piece {
	var out []Piece
	for _, s := range doc.Sections {
		units := splitUnits(s.Text, opt.MaxTokens)
		var cur []unit
		curTokens := 0
		emit := func() {
			if len(cur) == 0 {
				return
			}
			var b strings.Builder
			for _, u := range cur {
				b.WriteString(u.text)
			}
			text := strings.TrimSpace(b.String())
			if text != "" {
				out = append(out, Piece{Text: text, Heading: s.Heading, Page: s.Page, Position: len(out), Tokens: curTokens})
			}
		}
		for _, u := range units {
			if curTokens+u.tokens > opt.MaxTokens && len(cur) > 0 {
				emit()
				// Carry the tail of this piece into the next, within the overlap.
				var keep []unit
				kept := 0
				for i := len(cur) - 1; i >= 0; i-- {
					if kept+cur[i].tokens > opt.OverlapTokens || kept+cur[i].tokens+u.tokens > opt.MaxTokens {
						break
					}
					kept += cur[i].tokens
					keep = append([]unit{cur[i]}, keep...)
				}
				cur, curTokens = keep, kept
			}
			cur = append(cur, u)
			curTokens += u.tokens
		}
		emit()
	}
	return out
}

// EmbedText is what is embedded for a chunk: its document's title and its
// heading path, then its text, so that a chunk whose text does not say what
// it is about ("It opens at nine") is still found by a question naming its
// section ("opening hours"). The full-text half indexes the same title and
// heading (weighted A, migrations/00003_knowledge.sql).
func EmbedText(title, heading, text string) string {
	var ctx []string
	if title != "" && !strings.HasPrefix(heading, title) {
		ctx = append(ctx, title)
	}
	if heading != "" {
		ctx = append(ctx, heading)
	}
	if len(ctx) == 0 {
		return text
	}
	return strings.Join(ctx, " > ") + "\n\n" + text
}

type unit struct {
	text   string
	tokens int
}

// maxTokenBytes is more bytes than a token of usual text holds: a
// sentence or word longer than max tokens of it is cut without being
// counted whole. Counting is what costs (BPE over one run of letters grows
// faster than its length: a 20 MiB file of one "word" took 38 s and 3.5 GiB
// to chunk); a run of text denser than this is cut too, into smaller
// pieces, which is harmless.
const maxTokenBytes = 32

// countUpTo is text's tokens when text may be max tokens or fewer, else
// max+1 without counting it.
func countUpTo(text string, max int) int {
	if len(text) > max*maxTokenBytes {
		return max + 1
	}
	return llm.CountTokens(text)
}

// splitUnits cuts text into sentences (keeping their trailing space and
// paragraph breaks), and a sentence longer than max into word runs.
func splitUnits(text string, max int) []unit {
	var out []unit
	for _, s := range sentences(text) {
		n := countUpTo(s, max)
		if n <= max {
			out = append(out, unit{s, n})
			continue
		}
		var b strings.Builder
		bt := 0
		for _, w := range strings.SplitAfter(s, " ") {
			wt := countUpTo(w, max)
			if bt+wt > max && b.Len() > 0 {
				out = append(out, unit{b.String(), bt})
				b.Reset()
				bt = 0
			}
			if wt > max { // one "word" longer than a chunk: cut it by runes
				out = append(out, splitRunes(w, max)...)
				continue
			}
			b.WriteString(w)
			bt += wt
		}
		if b.Len() > 0 {
			out = append(out, unit{b.String(), bt})
		}
	}
	return out
}

// splitRunes cuts s into units of at most max tokens, assuming at least one
// rune per token; each part is counted a few times (a long run's cost).
func splitRunes(s string, max int) []unit {
	var out []unit
	ends := make([]int, 0, max) // where each rune of a part's candidate ends
	for len(s) > 0 {
		ends = ends[:0]
		for i := 0; i < len(s) && len(ends) < max; {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			ends = append(ends, i)
		}
		hi := len(ends) - 1
		tokens := llm.CountTokens(s[:ends[hi]])
		if tokens > max {
			// Fewer runes: the longest prefix of ends that fits, found by
			// bisection. A token holds at least a byte, so the first max
			// bytes fit. Dropping a rune at a time cost up to max counts a
			// part: text of runes of 4 bytes and tokens of one (tag
			// characters, U+E0000..) took 9 s and 4.7 GiB of allocations a
			// 200 KB to chunk, 15 minutes a file of 20 MiB.
			lo := -1 // the longest prefix known to fit; -1: not even one rune
			for lo+1 < hi && ends[lo+1] <= max {
				lo++
			}
			loTokens := 0
			if lo >= 0 {
				loTokens = llm.CountTokens(s[:ends[lo]])
			}
			for lo+1 < hi {
				mid := lo + (hi-lo)/2
				if n := llm.CountTokens(s[:ends[mid]]); n <= max {
					lo, loTokens = mid, n
				} else {
					hi = mid
				}
			}
			if lo < 0 { // one rune of more tokens than max
				lo, loTokens = 0, llm.CountTokens(s[:ends[0]])
			}
			hi, tokens = lo, loTokens
		}
		out = append(out, unit{s[:ends[hi]], tokens})
		s = s[ends[hi]:]
	}
	return out
}

// sentences splits after ., !, ? followed by space, and after newlines,
// keeping every byte.
func sentences(text string) []string {
	var out []string
	start := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		end := -1
		switch {
		case c == '\n':
			end = i + 1
		case (c == '.' || c == '!' || c == '?') && i+1 < len(text) && text[i+1] == ' ':
			end = i + 2
		}
		if end > 0 {
			out = append(out, text[start:end])
			start = end
			i = end - 1
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}
