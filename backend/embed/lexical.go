package embed

import (
	"context"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

var lexical = maker{"lexical", "", func(Config) (Embedder, bool, error) { return Lexical{}, true, nil }}

// LexicalDim is the dimension of the offline embedder.
const LexicalDim = 512

// Lexical is the offline embedder: no network, no model weights. It hashes
// a text's features into 512 signed buckets and normalises the vector:
// words (stop words dropped), crude stems (so "hours" meets "hour" and
// "opening" meets "opens"), word pairs, and character trigrams (so a
// misspelt or inflected word still shares most of its features). Cosine
// similarity then measures shared vocabulary and sub-words; together with
// the full-text half of hybrid search it finds paraphrased questions'
// chunks when they share stems. It does not know synonyms: that is what a
// neural embedder (OpenAI, Gemini, an OpenAI-compatible server) adds.
type Lexical struct{}

// Model implements Embedder.
func (Lexical) Model() string { return "parley-lexical-v1" }

// Dimension implements Embedder.
func (Lexical) Dimension() int { return LexicalDim }

// Embed implements Embedder.
func (l Lexical) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = l.vector(t)
	}
	return out, nil
}

func (Lexical) vector(text string) []float32 {
	v := make([]float32, LexicalDim)
	add := func(feature string, w float32) {
		h := fnv.New64a()
		h.Write([]byte(feature))
		x := h.Sum64()
		sign := float32(1)
		if x>>63 == 1 {
			sign = -1
		}
		v[x%LexicalDim] += sign * w
	}
	words := Words(text)
	prev := ""
	for _, w := range words {
		add("w:"+w, 1)
		if s := Stem(w); s != w {
			add("s:"+s, 0.7)
		} else {
			add("s:"+w, 0.7)
		}
		if prev != "" {
			add("b:"+prev+" "+w, 0.4)
		}
		prev = w
		padded := "^" + w + "$"
		r := []rune(padded)
		for j := 0; j+3 <= len(r); j++ {
			add("t:"+string(r[j:j+3]), 0.25)
		}
	}
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	if norm > 0 {
		n := float32(math.Sqrt(norm))
		for i := range v {
			v[i] /= n
		}
	} else {
		v[0] = 1 // a text with no words still needs a valid unit vector
	}
	return v
}

var stop = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`a an the is are was were be been being am of to in on at for from by with about as into
		and or but if then than so not no do does did done can could will would shall should may might must
		i me my we our you your he him his she her it its they them their this that these those there here
		what which who whom whose when where why how all any each some such own same too very just also`) {
		stop[w] = true
	}
}

// Words lowercases text and returns its words, stop words dropped.
func Words(text string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if !stop[w] {
			out = append(out, w)
		}
	}
	return out
}

// Stem strips common English suffixes: enough for "hours"/"hour" and
// "opening"/"open", not a linguist's stemmer.
func Stem(w string) string {
	for _, suf := range []string{"ations", "ation", "ings", "ing", "edly", "ies", "ied", "ed", "es", "ly", "s"} {
		if len(w) > len(suf)+2 && strings.HasSuffix(w, suf) {
			base := strings.TrimSuffix(w, suf)
			if suf == "ies" || suf == "ied" {
				base += "y"
			}
			return base
		}
	}
	return w
}
