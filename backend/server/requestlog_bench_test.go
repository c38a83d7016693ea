package server

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkRequestLog: what the request log line and the request metrics
// cost a request, around a handler that does nothing (logs discarded, as
// their encoding is the handler's cost, not this middleware's).
func BenchmarkRequestLog(b *testing.B) {
	prev := slog.Default()
	slog.SetDefault(slog.New(LogHandler{Handler: slog.NewJSONHandler(io.Discard, nil)}))
	b.Cleanup(func() { slog.SetDefault(prev) })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/agents/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) })
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{{"bare", mux}, {"logged", requestLog(mux)}} {
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/api/agents/0198c3c2-7e3a-7b5c-9d0e-1f2a3b4c5d6e", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				tc.h.ServeHTTP(w, req)
			}
		})
	}
}
