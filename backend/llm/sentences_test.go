package llm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A list's number and an abbreviation end no sentence; a passage of dots
// within words after a long run of blanks is one sentence.
func TestSentencesKeepListNumbersAndAbbreviations(t *testing.T) {
	require.Equal(t, []string{"1. Open the app.", "Ask Mr. Smith, e.g. today."}, sentences("1. Open the app. Ask Mr. Smith, e.g. today."))
	text := strings.Repeat("\t", 1000) + strings.Repeat("1.", 500)
	require.Equal(t, []string{strings.TrimSpace(text)}, sentences(text))
}

// Cutting a passage into sentences takes time in proportion to its length:
// a '.' within a word after a long run of blanks ("1.1.1…") made each one
// read the sentence so far, seconds of CPU for a passage of 200,000
// characters, each time an answer was looked for in it (docs/benchmarks.md).
func BenchmarkSentencesOfALongPassage(b *testing.B) {
	text := strings.Repeat("\t", 100000) + strings.Repeat("1.", 50000)
	for b.Loop() {
		sentences(text)
	}
}
