package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/parleyhq/parley/backend/reqinfo"
)

// A record logged within a span carries its trace and span ids (and the
// request id); one outside any carries neither.
func TestLogHandlerTraceIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(LogHandler{Handler: slog.NewJSONHandler(&buf, nil)})
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	ctx = reqinfo.With(ctx, &reqinfo.Info{ID: "req-1"})
	log.InfoContext(ctx, "inside")
	log.InfoContext(context.Background(), "outside")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var in, out map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &in))
	require.NoError(t, json.Unmarshal(lines[1], &out))
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", in["trace_id"])
	require.Equal(t, "00f067aa0ba902b7", in["span_id"])
	require.Equal(t, "req-1", in["request_id"])
	require.NotContains(t, out, "trace_id")
	require.NotContains(t, out, "span_id")
}
