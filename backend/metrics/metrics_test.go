package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Recording a request is a read-locked map lookup and an observation: no
// allocation once the route has been seen.
func TestRequestDoesNotAllocate(t *testing.T) {
	Request("GET /bench/{id}", 200, time.Millisecond)
	if n := testing.AllocsPerRun(100, func() { Request("GET /bench/{id}", 404, time.Millisecond) }); n != 0 {
		t.Fatalf("metrics.Request allocates %v times per call", n)
	}
}

// A turn whose provider reports a negative count adds nothing, where the
// counters panicked (and failed the turn after the model was paid).
func TestUsageIgnoresNegativeCounts(t *testing.T) {
	before := value(t, cost.WithLabelValues("p", "m", "pro"))
	Usage("p", "m", "pro", 10, -3, -0.5)
	if got := value(t, cost.WithLabelValues("p", "m", "pro")); got != before {
		t.Fatalf("cost went from %v to %v", before, got)
	}
	if got := value(t, tokens.WithLabelValues("p", "m", "pro", "input")); got != 10 {
		t.Fatalf("input tokens %v, want 10", got)
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
