package llm

import (
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// Text is counted in pieces that hold no run of whitespace longer than
// maxSpaceRun (the encoding's splitting is quadratic in such a run); the
// pieces are the text, and text without such runs is one piece.
func TestPieces(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		"",
		"The quick brown fox jumps over the lazy dog.\n\nAnd again.",
		strings.Repeat(" \n", 16000) + "a",
		"a" + strings.Repeat(" ", maxSpaceRun) + "b",
		"a" + strings.Repeat("\u00a0\t", 100) + "é" + strings.Repeat("\n", 1000),
	} {
		var got []string
		for p := range pieces(text) {
			got = append(got, p)
		}
		if joined := strings.Join(got, ""); joined != text {
			t.Fatalf("%.20q: pieces join to %.20q", text, joined)
		}
		for _, p := range got {
			if longest := longestSpaceRun(p); longest > maxSpaceRun {
				t.Fatalf("%.20q: a piece holds a run of %d spaces", text, longest)
			}
		}
		if longestSpaceRun(text) <= maxSpaceRun && len(got) != 1 {
			t.Fatalf("%.20q: %d pieces, want the text whole", text, len(got))
		}
	}
}

func longestSpaceRun(s string) int {
	longest, run := 0, 0
	for _, r := range s {
		if unicode.IsSpace(r) {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

// Counting in pieces changes a count by at most a token a cut.
func TestCountTokensInPieces(t *testing.T) {
	t.Parallel()
	if got, want := CountTokens("Hello, world!"), 4; got != want {
		t.Fatalf("CountTokens = %d, want %d", got, want)
	}
	if got := CountTokens(""); got != 0 {
		t.Fatalf("CountTokens(\"\") = %d", got)
	}
	for _, text := range []string{
		strings.Repeat(" \n", 4000) + "a",
		"def f():\n" + strings.Repeat(" ", 200) + "return 1\n",
	} {
		cuts := -1
		for range pieces(text) {
			cuts++
		}
		whole, err := func() (int, error) { CountTokens("x"); return codec.Count(text) }()
		if err != nil {
			t.Fatal(err)
		}
		if got := CountTokens(text); cuts == 0 || got < whole || got > whole+cuts {
			t.Fatalf("%.20q: CountTokens = %d in %d cuts, counted whole %d", text, got, cuts, whole)
		}
	}
}

// BenchmarkCountTokensSpaces: a question of the largest size chat allows
// (32,000 characters), all spaces and newlines. Counted whole: 1.8 s;
// in pieces, 31 ms (2-core EPYC, 2026-11-26).
func BenchmarkCountTokensSpaces(b *testing.B) {
	text := strings.Repeat(" \n", 15999) + "a"
	CountTokens("x")
	for b.Loop() {
		CountTokens(text)
	}
}

// WindowTokens counts exactly where a window's arithmetic needs it, and
// on a window with room to spare takes the bytes, which never change what
// the budget and the answer's room come to.
func TestWindowTokens(t *testing.T) {
	req := Request{System: "Answer from the documents.", Knowledge: []Passage{{Title: "Vault", Text: strings.Repeat("The vault is opened by the manager on duty. ", 60)}},
		Messages: []Message{{Role: RoleUser, Content: "Who opens the vault?"}}}
	exact := PromptTokens(req)
	small := Route{ContextTokens: 8000}
	require.Equal(t, exact, small.WindowTokens(0, req), "a small window: counted")
	large := Route{ContextTokens: 128000}
	got := large.WindowTokens(0, req)
	require.Greater(t, got, exact, "a large window: the bytes, not tokenized")
	require.Equal(t, large.HistoryBudget(exact), large.HistoryBudget(got))
	require.Equal(t, large.AnswerRoom(exact), large.AnswerRoom(got))
	// Held tokens that leave less than the whole budget: counted.
	require.Equal(t, exact, large.WindowTokens(128000-MaxOutputTokens-maxHistoryTokens, req))
}

// The tools offered are prompt: their names, descriptions and schemas
// count, as providers bill them and as they take a small window's room.
func TestPromptTokensCountsTheToolsOffered(t *testing.T) {
	req := Request{System: "Answer.", Messages: []Message{{Role: RoleUser, Content: "Who opens the vault?"}}}
	without := PromptTokens(req)
	description := strings.Repeat("Fetches an order's status from the shop's system. ", 40)
	req.Tools = []Tool{{Name: "order_status", Description: description, Parameters: map[string]any{
		"type": "object", "properties": map[string]any{"orderId": map[string]any{"type": "string", "description": "The order's number, as on the receipt."}},
	}}}
	with := PromptTokens(req)
	require.GreaterOrEqual(t, with-without, CountTokens(description)+CountTokens("order_status"), "the description and the name")
	require.Greater(t, with-without, CountTokens(description)+CountTokens("order_status"), "and the schema")
	small := Route{ContextTokens: 8000}
	require.Less(t, small.HistoryBudget(small.WindowTokens(0, req)), small.HistoryBudget(without), "the history makes room for them")
}

// Images are prompt: each counts ImageTokens, in the window arithmetic as
// in the count of a call without usage. Left out, a message's images took
// a small window's room unseen, the history filled it, and the server
// refused the turn.
func TestPromptTokensCountsImages(t *testing.T) {
	req := Request{System: "Answer.", Messages: []Message{{Role: RoleUser, Content: "What is in these?"}}}
	without := PromptTokens(req)
	req.Messages[0].Images = []Image{{MIMEType: "image/png", Data: []byte("a")}, {MIMEType: "image/png", Data: []byte("b")}}
	require.Equal(t, without+2*ImageTokens, PromptTokens(req))
	require.GreaterOrEqual(t, promptBytes(req), PromptTokens(req), "bytes are never fewer than tokens")
	small := Route{ContextTokens: 8000}
	require.Equal(t, small.HistoryBudget(without)-2*ImageTokens, small.HistoryBudget(small.WindowTokens(0, req)), "the history makes room for them")
}
