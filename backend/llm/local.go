package llm

import (
	"context"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Local is the offline engine: deterministic, no network, no keys. It is not
// a language model and says so. With knowledge, it answers extractively: the
// sentences of the given passages that best match the question, best first,
// with their sources. Without, it says plainly that it has no knowledge on
// the question. It streams its answer word by word.
//
// Offered the tools, it calls lead_capture for a message that carries an
// email address or a phone number and request_human for one that asks for
// a person (localtools.go), then acknowledges what lead_capture did: the
// flows work with no provider keys.
type Local struct{}

// Provider implements Model.
func (Local) Provider() string { return "local" }

// NoKnowledgeAnswer is what Local says when nothing it was given matches.
const NoKnowledgeAnswer = "I have no knowledge about that yet. (This is Parley's offline engine, which answers only from an agent's datastores; configure a model provider for generated answers.)"

// maxSentences bounds an extractive answer.
const maxSentences = 3

// Stream implements Model.
func (Local) Stream(ctx context.Context, req Request, yield func(Event) error) error {
	question := ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == RoleUser {
			question = req.Messages[i].Content
			break
		}
	}
	if calls := localCalls(req); len(calls) > 0 {
		for i := range calls {
			if err := yield(Event{ToolCall: &calls[i]}); err != nil {
				return err
			}
		}
		return yield(Event{Usage: &Usage{PromptTokens: int64(PromptTokens(req))}})
	}
	answer := extract(question, req.Knowledge)
	if answer == "" {
		answer = closest(req.Knowledge)
	}
	if ack := afterTools(req); ack != "" {
		// What the tools did, then what the knowledge says, if anything.
		answer = strings.TrimSpace(ack + " " + answer)
	}
	if answer == "" {
		answer = NoKnowledgeAnswer
	}
	for _, tok := range splitTokens(answer) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := yield(Event{Text: tok}); err != nil {
			return err
		}
	}
	return yield(Event{Usage: &Usage{PromptTokens: int64(PromptTokens(req)), CompletionTokens: int64(CountTokens(answer))}})
}

// extract picks the sentences of the passages sharing the most words with
// the question.
// semanticFloor is the embedding similarity from which a passage that shares
// no word with the question is taken to answer it. Measured with the neural
// embedder (Universal Sentence Encoder Lite): paraphrases of an entry score
// 0.32 to 0.46 with it, unrelated questions 0.2 or less. The lexical
// embedder's vectors only come close when words are shared, which extract
// handles first.
const semanticFloor = 0.3

// closest answers with the first sentences of the passage most similar to
// the question by embedding, when it is similar enough: the neural embedder
// finds entries that say the same thing in other words.
func closest(passages []Passage) string {
	best := -1
	for i, p := range passages {
		if p.Similarity >= semanticFloor && (best < 0 || p.Similarity > passages[best].Similarity) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	s := sentences(passages[best].Text)
	return strings.Join(s[:min(len(s), maxSentences)], " ")
}

func extract(question string, passages []Passage) string {
	q := words(question)
	if len(q) == 0 {
		return ""
	}
	type scored struct {
		text  string
		score float64
		order int
	}
	var cands []scored
	for pi, p := range passages {
		for si, s := range sentences(p.Text) {
			w := words(s)
			hits := 0
			for t := range w {
				if q[t] {
					hits++
				}
			}
			if hits == 0 {
				continue
			}
			cands = append(cands, scored{text: s, score: float64(hits) / float64(len(q)), order: pi*10000 + si})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].score != cands[j].score {
			return cands[i].score > cands[j].score
		}
		return cands[i].order < cands[j].order
	})
	var out []string
	for i := 0; i < len(cands) && i < maxSentences; i++ {
		out = append(out, cands[i].text)
	}
	return strings.Join(out, " ")
}

var stopWords = map[string]bool{
	"the": true, "a": true, "an": true, "is": true, "are": true, "of": true, "to": true, "and": true,
	"or": true, "in": true, "on": true, "for": true, "what": true, "how": true, "do": true, "does": true,
	"i": true, "you": true, "it": true, "can": true, "my": true, "your": true, "with": true, "be": true,
}

func words(s string) map[string]bool {
	out := map[string]bool{}
	// Composed (NFC), a mark part of its word: a question's "é" meets a
	// passage's however each wrote it, and a Devanagari vowel sign does
	// not cut its word in two.
	for _, w := range strings.FieldsFunc(norm.NFC.String(strings.ToLower(s)), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsMark(r) && !unicode.IsDigit(r) }) {
		if stopWords[w] {
			continue
		}
		r := []rune(w)
		if len(r) < 2 || !slices.ContainsFunc(r, unspaced) {
			out[w] = true
			continue
		}
		// Chinese and Japanese put no space between words: overlapping
		// pairs of characters stand for them, as search engines' bigrams
		// do, or a question shared no word with any passage.
		for i := 0; i+1 < len(r); i++ {
			out[string(r[i:i+2])] = true
		}
	}
	return out
}

// unspaced reports whether r is of a script written without spaces.
func unspaced(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana)
}

// sentences cuts text into sentences: at a line end, at a full stop,
// exclamation or question mark of Chinese or Japanese, and at '.', '!' or
// '?' followed by a space, the end of the text or a Chinese or Japanese
// character (after any closing quotes or brackets). A '.' within a word
// does not end a sentence: cut there, an answer told a price of "$19."
// for $19.99, a site "docs." for docs.example.com.
func sentences(text string) []string {
	var out []string
	start := 0
	for i, r := range text {
		if i < start {
			continue // the closing quotes or brackets of the last sentence
		}
		end := i + utf8.RuneLen(r)
		switch r {
		case '\n', '。', '！', '？':
		case '.', '!', '?':
			for end < len(text) && strings.ContainsRune(sentenceClosers, rune(text[end])) {
				end++
			}
			if next, _ := utf8.DecodeRuneInString(text[end:]); end < len(text) && !unicode.IsSpace(next) && !unspaced(next) {
				continue
			}
		default:
			continue
		}
		if s := strings.TrimSpace(text[start:end]); len(s) > 1 {
			out = append(out, s)
		}
		start = end
	}
	if s := strings.TrimSpace(text[start:]); s != "" {
		out = append(out, s)
	}
	return out
}

// sentenceClosers may follow a sentence's last mark within it.
const sentenceClosers = `"')]}`

// splitTokens cuts text into streaming pieces: each word with the space
// before it, so that the pieces concatenate back to the text.
func splitTokens(text string) []string {
	var out []string
	start := 0
	for i := 1; i < len(text); i++ {
		if text[i] == ' ' {
			out = append(out, text[start:i])
			start = i
		}
	}
	return append(out, text[start:])
}
