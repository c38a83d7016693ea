package metrics

import (
	"testing"
	"time"
)

// Recording a request is a read-locked map lookup and an observation: no
// allocation once the route has been seen.
func TestRequestDoesNotAllocate(t *testing.T) {
	Request("GET /bench/{id}", 200, time.Millisecond)
	if n := testing.AllocsPerRun(100, func() { Request("GET /bench/{id}", 404, time.Millisecond) }); n != 0 {
		t.Fatalf("metrics.Request allocates %v times per call", n)
	}
}

func BenchmarkRequest(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Request("POST /api/v2/agent/{agentId}/chat", 200, 5*time.Millisecond)
	}
}

func BenchmarkRequestParallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			Request("POST /api/v2/agent/{agentId}/chat", 200, 5*time.Millisecond)
		}
	})
}
