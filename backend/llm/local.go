package llm

import (
	"context"
	"regexp"
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
	ack := afterTools(req)
	if ack != "" {
		// The contact details just noted ask nothing: their words
		// ("example", "com") answered with the passages giving the shop's
		// own address, as did the passage nearest the whole message.
		question = phonePattern.ReplaceAllString(emailPattern.ReplaceAllString(question, " "), " ")
	}
	answer := extract(question, req.Knowledge)
	if answer == "" && ack == "" && strings.IndexFunc(question, letterOrDigit) >= 0 {
		// A message of no letter or digit ("👍", "?", a zero-width space)
		// asks nothing: the passage nearest its embedding was any passage.
		answer = closest(req.Knowledge)
	}
	if ack != "" {
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
	n := min(len(s), maxSentences)
	return joinSentences(append(s[:n:n], listAfter(s, n-1)...))
}

func extract(question string, passages []Passage) string {
	q := words(question)
	if len(q) == 0 {
		return ""
	}
	type scored struct {
		text   string
		score  float64
		order  int
		pi, si int
	}
	var cands []scored
	cut := make([][]string, len(passages))
	for pi, p := range passages {
		cut[pi] = sentences(p.Text)
		for si, s := range cut[pi] {
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
			cands = append(cands, scored{text: s, score: float64(hits) / float64(len(q)), order: pi*10000 + si, pi: pi, si: si})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].score != cands[j].score {
			return cands[i].score > cands[j].score
		}
		return cands[i].order < cands[j].order
	})
	var out []string
	taken := map[[2]int]bool{}
	for i, n := 0, 0; i < len(cands) && n < maxSentences; i++ {
		c := cands[i]
		if taken[[2]int{c.pi, c.si}] {
			continue // an item of a list already given
		}
		taken[[2]int{c.pi, c.si}] = true
		n++
		out = append(out, c.text)
		for j, item := range listAfter(cut[c.pi], c.si) {
			if k := [2]int{c.pi, c.si + 1 + j}; !taken[k] {
				taken[k] = true
				out = append(out, item)
			}
		}
	}
	return joinSentences(out)
}

// maxListItems bounds the list items an answer gives after the line that
// introduces them.
const maxListItems = 20

// listAfter is the list that follows sentence i of s when it introduces
// one (it ends with ':'): the items after it, at most maxListItems. Without
// them, "What shipping options do you have?" was answered "Shipping
// options:".
func listAfter(s []string, i int) []string {
	if i < 0 || i >= len(s) || !strings.HasSuffix(s[i], ":") {
		return nil
	}
	end := i + 1
	for end < len(s) && end-i-1 < maxListItems && listItem(s[end]) {
		end++
	}
	return s[i+1 : end]
}

// listItemPattern is the start of a Markdown list item: "- ", "* ", "+ ",
// "• ", "1. " or "1) ".
var listItemPattern = regexp.MustCompile(`^(?:[-*+•]|\d{1,3}[.)])\s`)

func listItem(s string) bool { return listItemPattern.MatchString(s) }

// joinSentences joins an answer's sentences as the passages write them: a
// space between two, none between two of Chinese or Japanese (their text
// has none), and a line break around a list item, which a space made part
// of the line before ("Shipping options: - Express: 1-2 days").
func joinSentences(s []string) string {
	var b strings.Builder
	for i, x := range s {
		if i > 0 {
			prev, _ := utf8.DecodeLastRuneInString(s[i-1])
			next, _ := utf8.DecodeRuneInString(x)
			switch {
			case listItem(x) || listItem(s[i-1]):
				b.WriteByte('\n')
			case cjk(prev) && unicode.IsPunct(prev) && cjk(next):
				// After a Chinese or Japanese full stop (or closing
				// bracket); a line that ends without one, a heading,
				// keeps a space from the line after it.
			default:
				b.WriteByte(' ')
			}
		}
		b.WriteString(x)
	}
	return b.String()
}

// cjk reports whether r is Chinese or Japanese text or punctuation.
func cjk(r rune) bool {
	return unspaced(r) || r >= 0x3000 && r <= 0x303f || r >= 0xff00 && r <= 0xffef
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

func letterOrDigit(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

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
			// Asked only of a '.' that would end the sentence: listNumber
			// reads the sentence so far, and asked of every '.' within
			// words ("1.1.1…" after a run of blanks) it made a passage's
			// cutting quadratic.
			if r == '.' && (abbreviation(text[start:i]) || listNumber(text[start:i])) {
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

// titles are abbreviations written before a name, whose '.' ends no
// sentence.
var titles = map[string]bool{"mr": true, "mrs": true, "ms": true, "dr": true, "prof": true, "st": true, "mt": true, "vs": true, "jr": true, "sr": true}

// abbreviation reports whether the word that ends before, followed by a
// '.', is an abbreviation: a title ("Mr", "Dr", "St") or letters each
// followed by a '.' ("e.g", "i.e", "U.S"). Cut there, an answer said
// "Overnight: e.g." and "Contact Mr.".
func abbreviation(before string) bool {
	// Only the last word counts: looking further back made a passage of
	// dots and no spaces quadratic.
	before = before[max(0, len(before)-64):]
	w := before
	if i := strings.LastIndexFunc(before, unicode.IsSpace); i >= 0 {
		_, n := utf8.DecodeRuneInString(before[i:])
		w = before[i+n:]
	}
	w = strings.TrimLeft(w, `"'([{`)
	if k := strings.LastIndexByte(w, '.'); k >= 0 {
		r, n := utf8.DecodeRuneInString(w[k+1:])
		return n > 0 && k+1+n == len(w) && unicode.IsLetter(r)
	}
	return titles[strings.ToLower(w)]
}

// listNumber reports whether the sentence begun before a '.' is the number
// of a numbered list's item: "1. Open the app." was cut into "1." and
// "Open the app.".
func listNumber(before string) bool {
	n := strings.TrimSpace(before)
	return n != "" && len(n) <= 3 && strings.Trim(n, "0123456789") == ""
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
