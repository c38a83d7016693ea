package wire

import "testing"

// BenchmarkFrame frames one token event, as every token of every stream is.
func BenchmarkFrame(b *testing.B) {
	data := []byte(`{"type":"token","value":" token"}`)
	b.ReportAllocs()
	for b.Loop() {
		if len(Frame("", data)) == 0 {
			b.Fatal("empty")
		}
	}
}
