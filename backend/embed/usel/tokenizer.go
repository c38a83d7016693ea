package usel

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The tokenizer is the one of @energetic-ai/embeddings 0.2.0 (itself that
// of @tensorflow-models/universal-sentence-encoder), reproduced with its
// quirks so that the ids are the same:
//
//   - the text is NFKC-normalised; a non-empty one gets a leading "▁" and
//     its spaces (U+0020 only) become "▁";
//   - Viterbi over the pieces' log-probabilities on code points, the first
//     six pieces (<unk> "�", <s>, </s>, three extras) never matched; a
//     position no piece starts at becomes the unknown id 0, scored 0;
//   - a position's best score counts as unset while it is exactly 0, and
//     later candidates win ties;
//   - walking back, a piece's length is its UTF-16 length;
//   - consecutive unknown ids are merged into one.
//
// It is case-sensitive (the vocabulary has "▁The" and "▁the").

const (
	separator = '▁'
	reserved  = 6 // pieces not in the trie
	unknownID = 0
)

type tokenizer struct {
	pieces []string
	scores []float64
	// units is each piece's length in UTF-16 code units (the backtrack uses
	// JavaScript's String.length).
	units []int
	root  *trieNode
}

type trieNode struct {
	children map[rune]*trieNode
	end      bool
	depth    int // the key's length in code points
	score    float64
	index    int32
}

func newTokenizer(pieces []string, scores []float64) *tokenizer {
	t := &tokenizer{pieces: pieces, scores: scores, units: make([]int, len(pieces)), root: &trieNode{}}
	for i, p := range pieces {
		for _, r := range p {
			t.units[i]++
			if r > 0xffff {
				t.units[i]++
			}
		}
	}
	for i := reserved; i < len(pieces); i++ {
		n := t.root
		for _, r := range pieces[i] {
			c := n.children[r]
			if c == nil {
				if n.children == nil {
					n.children = map[rune]*trieNode{}
				}
				c = &trieNode{depth: n.depth + 1}
				n.children[r] = c
			}
			n = c
		}
		if n != t.root {
			// A later duplicate replaces an earlier one, as in the JS trie.
			n.end, n.score, n.index = true, scores[i], int32(i)
		}
	}
	return t
}

// encode returns the ids of a text (all of them: the model keeps the first
// MaxTokens).
func (t *tokenizer) encode(text string) []int32 {
	if !utf8.ValidString(text) {
		// A JavaScript string cannot hold invalid UTF-8; the usual conversion
		// (encoding/json, TextDecoder) makes each bad byte U+FFFD.
		text = string([]rune(text))
	}
	text = norm.NFKC.String(text)
	if text == "" {
		return nil
	}
	syms := []rune(string(separator) + strings.ReplaceAll(text, " ", string(separator)))
	n := len(syms)

	// The JS code builds the lattice, then for each end position (in order)
	// relaxes it from the pieces ending there by increasing start. Relaxing
	// forward from each start in order visits the same candidates in the
	// same order, with the start's score already final, so it gives the
	// same result without the lattice.
	best := make([]float64, n+1)
	words := make([]int32, n+1)
	relax := func(e int, s float64, id int32) {
		if best[e] == 0 || s >= best[e] {
			best[e], words[e] = s, id
		}
	}
	for i := range n {
		found := false
		node := t.root.children[syms[i]]
		for j := i; node != nil; j++ {
			if node.end {
				relax(i+node.depth, node.score+best[i], node.index)
				found = true
			}
			if j+1 >= n {
				break
			}
			node = node.children[syms[j+1]]
		}
		if !found {
			relax(i+1, 0+best[i], unknownID)
		}
	}
	var ids []int32
	for i := n; i > 0; i -= t.units[words[i]] {
		id := words[i]
		if id == unknownID && len(ids) > 0 && ids[len(ids)-1] == unknownID {
			continue
		}
		ids = append(ids, id)
	}
	for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
		ids[i], ids[j] = ids[j], ids[i]
	}
	return ids
}
