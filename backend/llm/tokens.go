package llm

import (
	"encoding/json"
	"sync"
	"unicode"
	"unicode/utf8"

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
//
// The text is counted in pieces, cut inside whitespace every maxSpaceRun
// runes of it: the encoding's splitting expression (run by a backtracking
// engine) is quadratic in a run of mixed spaces and newlines, and a
// question of 16,000 " \n" took 1.8 s to count, on every later turn of its
// conversation too (31 ms in pieces, BenchmarkCountTokensSpaces). A cut
// adds at most one token; text without such runs is counted whole, as
// before.
func CountTokens(text string) int {
	codecOnce.Do(func() {
		c, err := tokenizer.Get(tokenizer.O200kBase)
		if err != nil {
			panic("llm: the o200k_base vocabulary is compiled in: " + err.Error())
		}
		codec = c
	})
	total := 0
	for piece := range pieces(text) {
		n, err := codec.Count(piece)
		if err != nil {
			n = len(piece) / 4
		}
		total += n
	}
	return total
}

// PromptTokens estimates req's prompt as the providers send it: the system
// prompt with the retrieved passages (systemWithKnowledge: often most of a
// prompt), each message's text, the tool calls it made and their results,
// and the tools offered (name, description, parameters' schema as JSON:
// providers bill them as prompt, and on a small window they take room
// from the answer), and each image at ImageTokens. It is the count of a call whose provider reports
// no usage (cut mid-answer, a server that reports none).
func PromptTokens(req Request) int { return promptSize(req, CountTokens) }

// ImageTokens is what an image is counted in a prompt: about the most any
// provider here bills for one it scales down (Anthropic's ~1,600 for 1.15
// megapixels; OpenAI's high detail at most ~1,100; Gemini's 258 a 768-pixel
// tile). Left out, a message's ten images (some 16,000 tokens) left the
// window arithmetic (Route.HistoryBudget, AnswerRoom) a history that did
// not fit beside them, and a small window's server refused the turn.
const ImageTokens = 1600

// promptBytes is the size in bytes of what PromptTokens counts: never less
// than its tokens (a token is at least a byte).
func promptBytes(req Request) int { return promptSize(req, func(s string) int { return len(s) }) }

// MessageTokens is what a message of a prompt takes beside its text: its
// role and delimiters (OpenAI counts 3 tokens a message, and 3 that prime
// the reply; the chat templates of the models vLLM and Ollama serve, 5:
// Llama 3's header and end-of-turn tokens, ChatML's <|im_start|>role and
// <|im_end|>). Uncounted, the 200 short messages of a long conversation's
// history took some 600 to 1,000 tokens more than the window arithmetic
// left them, and a server that checks prompt + bound against its window
// (OpenAI, vLLM) refused every later turn of the conversation.
const MessageTokens = 5

// promptSize adds up size of each text of req's prompt as sent, and
// MessageTokens for each message that carries them (the system prompt,
// each message, each tool result: OpenAI sends one message for each) and
// for the reply's priming.
func promptSize(req Request, size func(string) int) int {
	n := MessageTokens
	if sys := systemWithKnowledge(req); sys != "" {
		n += size(sys) + MessageTokens
	}
	for _, m := range req.Messages {
		// Counted as tokens in bytes too: promptBytes is never less.
		n += size(m.Content) + len(m.Images)*ImageTokens
		if len(m.ToolResults) == 0 {
			n += MessageTokens
		}
		for _, c := range m.ToolCalls {
			n += size(c.Name) + size(c.Arguments)
		}
		for _, r := range m.ToolResults {
			n += size(r.Content) + MessageTokens
		}
	}
	for _, t := range req.Tools {
		n += size(t.Name) + size(t.Description)
		if schema, err := json.Marshal(t.Parameters); err == nil {
			n += size(string(schema))
		}
	}
	return n
}

// maxSpaceRun is the longest run of whitespace a piece holds, in runes.
const maxSpaceRun = 32

// pieces cuts text inside each run of whitespace longer than maxSpaceRun,
// every maxSpaceRun runes of it; the pieces, joined, are text.
func pieces(text string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		start, run := 0, 0
		for i := 0; i < len(text); {
			r, size := utf8.DecodeRuneInString(text[i:])
			if !unicode.IsSpace(r) {
				run = 0
			} else if run++; run > maxSpaceRun {
				if !yield(text[start:i]) {
					return
				}
				start, run = i, 1
			}
			i += size
		}
		if start < len(text) || len(text) == 0 {
			yield(text[start:])
		}
	}
}
