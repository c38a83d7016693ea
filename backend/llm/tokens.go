package llm

import (
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

var (
	codecOnce sync.Once
	codec     tokenizer.Codec
)

// CountTokens counts text's tokens with the o200k_base encoding (GPT-4o's),
// compiled into the binary: the count used where a provider reports no usage
// and for the prompt's context budget. Other providers' tokenizers differ by
// a few percent.
func CountTokens(text string) int {
	codecOnce.Do(func() {
		c, err := tokenizer.Get(tokenizer.O200kBase)
		if err != nil {
			panic("llm: the o200k_base vocabulary is compiled in: " + err.Error())
		}
		codec = c
	})
	n, err := codec.Count(text)
	if err != nil {
		return len(text) / 4
	}
	return n
}
