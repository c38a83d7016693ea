package llm

import (
	"encoding/json"
	"testing"

	"github.com/openai/openai-go/v3"
)

// A token chunk as OpenAI streams it.
var tokenChunk = []byte(`{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1732400000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"xY"}`)

// BenchmarkDecodeChunk decodes one streamed token chunk into the SDK's
// ChatCompletionChunk and into streamChunk, as ssestream.Stream does
// (json.Unmarshal), once per token of every stream.
func BenchmarkDecodeChunk(b *testing.B) {
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c openai.ChatCompletionChunk
			if err := json.Unmarshal(tokenChunk, &c); err != nil || c.Choices[0].Delta.Content != " token" {
				b.Fatal(err)
			}
		}
	})
	b.Run("streamChunk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c streamChunk
			if err := json.Unmarshal(tokenChunk, &c); err != nil || c.Choices[0].Delta.Content != " token" {
				b.Fatal(err)
			}
		}
	})
}
