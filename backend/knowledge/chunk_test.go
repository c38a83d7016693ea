package knowledge

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/stretchr/testify/require"
)

func randomDoc(r *rand.Rand) Document {
	words := strings.Fields("parley hosts agents opening hours are nine to five on weekdays refunds take fourteen days " +
		"the warehouse ships orders daily supercalifragilisticexpialidocious naïve café 東京 emoji 🎉")
	var doc Document
	for s := 0; s < 1+r.Intn(4); s++ {
		var b strings.Builder
		for p := 0; p < 1+r.Intn(6); p++ {
			for w := 0; w < r.Intn(400); w++ {
				b.WriteString(words[r.Intn(len(words))])
				switch r.Intn(12) {
				case 0:
					b.WriteString(". ")
				case 1:
					b.WriteString("\n")
				default:
					b.WriteString(" ")
				}
			}
			if r.Intn(50) == 0 {
				b.WriteString(strings.Repeat("x", 3000)) // a "word" longer than any chunk
			}
			b.WriteString("\n\n")
		}
		doc.Sections = append(doc.Sections, Section{Heading: "H", Text: b.String(), Page: s + 1})
	}
	return doc
}

// Properties: no text lost, sizes within bounds, overlap as configured.
func TestChunkProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 60; i++ {
		doc := randomDoc(r)
		opt := ChunkOptions{MaxTokens: 40 + r.Intn(200), OverlapTokens: r.Intn(30)}
		pieces := Chunk(doc, opt)
		// Sizes.
		for _, p := range pieces {
			if n := llm.CountTokens(p.Text); n > opt.MaxTokens {
				t.Fatalf("piece of %d tokens > max %d", n, opt.MaxTokens)
			}
			if strings.TrimSpace(p.Text) == "" {
				t.Fatal("empty piece")
			}
		}
		// No text lost: every word of every section appears, in order, across
		// the section's pieces (overlaps may repeat words).
		for si, s := range doc.Sections {
			var joined strings.Builder
			for _, p := range pieces {
				if p.Page == si+1 {
					joined.WriteString(p.Text + " ")
				}
			}
			all := joined.String()
			pos := 0
			for _, w := range strings.Fields(s.Text) {
				idx := strings.Index(all[pos:], w)
				if idx < 0 {
					// The word may have been cut across two pieces (over-long words only).
					if len(w) > 100 {
						continue
					}
					t.Fatalf("word %q lost (section %d, options %+v)", w, si, opt)
				}
				pos += idx
			}
		}
		// Overlap: consecutive pieces of a section share at most OverlapTokens.
		for j := 1; j < len(pieces); j++ {
			a, b := pieces[j-1], pieces[j]
			if a.Page != b.Page {
				continue
			}
			shared := longestSuffixPrefix(a.Text, b.Text)
			if !strings.Contains(shared, " ") && len(shared) > 100 {
				continue // two cuts of one over-long word may look alike
			}
			if n := llm.CountTokens(shared); shared != "" && n > opt.OverlapTokens+2 {
				t.Fatalf("overlap of %d tokens > %d: %q", n, opt.OverlapTokens, shared)
			}
		}
	}
}

func TestChunkOverlapIsPresent(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := 0; i < 100; i++ {
		b.WriteString("Sentence number ")
		b.WriteString(strings.Repeat("word ", 3))
		b.WriteString(". ")
	}
	pieces := Chunk(Document{Sections: []Section{{Text: b.String()}}}, ChunkOptions{MaxTokens: 60, OverlapTokens: 15})
	if len(pieces) < 3 {
		t.Fatalf("%d pieces", len(pieces))
	}
	for j := 1; j < len(pieces); j++ {
		if longestSuffixPrefix(pieces[j-1].Text, pieces[j].Text) == "" {
			t.Fatalf("pieces %d and %d share nothing", j-1, j)
		}
	}
}

// longestSuffixPrefix is the longest run of whole words that ends a and
// starts b.
func longestSuffixPrefix(a, b string) string {
	aw, bw := strings.Fields(a), strings.Fields(b)
	for n := min(len(aw), len(bw)); n > 0; n-- {
		if strings.Join(aw[len(aw)-n:], " ") == strings.Join(bw[:n], " ") {
			return strings.Join(bw[:n], " ")
		}
	}
	return ""
}

// A run too long to count whole (a line of hex, a sentence without a stop)
// is cut into pieces within the limit, with nothing lost.
func TestChunkOfLongRuns(t *testing.T) {
	t.Parallel()
	opt := DefaultChunkOptions
	for name, text := range map[string]string{
		"one word":         strings.Repeat("0123456789abcdef", 4000) + "END",
		"one sentence":     strings.Repeat("words without a full stop ", 3000) + "END",
		"dense characters": strings.Repeat("東京🎉", 8000) + "END",
	} {
		pieces := Chunk(Document{Sections: []Section{{Text: text}}}, opt)
		require.Greater(t, len(pieces), 1, name)
		for _, p := range pieces {
			require.LessOrEqual(t, llm.CountTokens(p.Text), opt.MaxTokens, name)
		}
		require.True(t, strings.HasSuffix(pieces[len(pieces)-1].Text, "END"), "%s: the end was lost", name)
	}
}

// BenchmarkChunkOneLongRun chunks 4 MiB of one "word" (no space, no
// sentence end), as a file of hex or base64 is: its parts are cut without
// counting the whole run (countUpTo).
//
//	go test -run '^$' -bench BenchmarkChunkOneLongRun -benchmem ./backend/knowledge/
func BenchmarkChunkOneLongRun(b *testing.B) {
	doc := Document{Sections: []Section{{Text: strings.Repeat("0123456789abcdef", 4<<20/16)}}}
	b.SetBytes(4 << 20)
	for b.Loop() {
		if len(Chunk(doc, DefaultChunkOptions)) == 0 {
			b.Fatal("no pieces")
		}
	}
}

// BenchmarkChunkDenseRunes: 200 KB of runes of four tokens each (tag
// characters), which the chunker must cut inside a 300-character part.
func BenchmarkChunkDenseRunes(b *testing.B) {
	doc := Document{Sections: []Section{{Text: strings.Repeat("\U000E0067", 50<<10)}}}
	b.SetBytes(200 << 10)
	for b.Loop() {
		if len(Chunk(doc, DefaultChunkOptions)) == 0 {
			b.Fatal("no pieces")
		}
	}
}

// A run of runes of one token a byte (tag characters, U+E0000..: four
// bytes, four tokens each) was cut a rune at a time, counting each
// shorter prefix again: 9 s and 4.7 GiB of allocations for 200 KB, some
// 15 minutes for a 20 MiB file. Bisection counts a few prefixes a piece.
func TestChunkDenseRunes(t *testing.T) {
	text := strings.Repeat("\U000E0067", 16<<10) // 64 KiB
	var pieces []Piece
	n := allocated(func() { pieces = Chunk(Document{Sections: []Section{{Text: text}}}, DefaultChunkOptions) })
	require.Less(t, n, uint64(256<<20), "allocated %d MiB", n>>20)
	var joined strings.Builder
	for i, p := range pieces {
		require.LessOrEqual(t, llm.CountTokens(p.Text), DefaultChunkOptions.MaxTokens)
		if i < len(pieces)-1 {
			require.GreaterOrEqual(t, p.Tokens, DefaultChunkOptions.MaxTokens-4, "a piece is as full as it can be")
		}
		joined.WriteString(p.Text)
	}
	require.Contains(t, joined.String(), strings.Repeat("\U000E0067", 70))
	require.GreaterOrEqual(t, joined.Len(), len(text))
}
