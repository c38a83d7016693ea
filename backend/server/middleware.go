package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/metrics"
	"github.com/parleyhq/parley/backend/reqinfo"
	"github.com/parleyhq/parley/compat"
)

// RequestID returns the id of the request ctx belongs to, if any.
func RequestID(ctx context.Context) string {
	if i := reqinfo.From(ctx); i != nil {
		return i.ID
	}
	return ""
}

// requestLog gives every request an id (the client's X-Request-Id when it is
// sane, else a new one), echoes it, logs one line per request and records
// it in the request metrics. The line carries the caller's organization and
// key ids, the error code and the real status (a failed gRPC call's, not
// the 200 it travels behind), which inner layers note in the request's
// reqinfo.Info.
func requestLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if !saneID(id) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-Id", id)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		rec.info.ID = id
		ctx := reqinfo.With(r.Context(), &rec.info)
		r2 := r.WithContext(ctx)
		// Deferred: a response aborted (http.ErrAbortHandler, after it
		// began: a panic recoverPanics could not answer, a download cut
		// short by a failure) is logged and counted too, as a failure,
		// before the panic goes on to net/http, which drops the
		// connection.
		defer func() {
			if p := recover(); p != nil {
				logRequest(ctx, r, r2, rec, start, true)
				panic(p)
			}
		}()
		next.ServeHTTP(rec, r2)
		logRequest(ctx, r, r2, rec, start, false)
	})
}

// logRequest writes a request's log line and records its metrics once its
// handler is done; aborted: the response was cut short, a failure whatever
// its status line said (499 when the client had gone, else 500).
func logRequest(ctx context.Context, r, r2 *http.Request, rec *statusRecorder, start time.Time, aborted bool) {
	took := time.Since(start)

	info := &rec.info
	if info.Code == "" {
		noteGRPCStatus(info, rec.Header())
	}
	status := rec.status
	if info.Status != 0 {
		status = info.Status
	}
	if aborted {
		status = http.StatusInternalServerError
		if r.Context().Err() != nil {
			status = statusClientClosed
		}
	}
	route := info.Route
	if route == "" {
		// The mux sets the pattern it matched on the request it serves
		// (notePattern passes it on when that is a copy).
		route = r2.Pattern
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() && route != "" {
		// otelhttp, outside, cannot see the pattern on its copy (nor the
		// console's own mux's, which it notes in info.Route). An RPC's
		// span is otelconnect's, inside: this one is not recording.
		span.SetName(route)
		span.SetAttributes(attribute.String("http.route", route))
	}
	metrics.Request(route, status, took)

	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs,
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", route),
		slog.Int("status", status), slog.Float64("took_ms", float64(took.Microseconds())/1000),
		slog.String("proto", r.Proto))
	if status != rec.status {
		attrs = append(attrs, slog.Int("http_status", rec.status))
	}
	if info.Code != "" {
		attrs = append(attrs, slog.String("code", info.Code))
	}
	if aborted {
		attrs = append(attrs, slog.Bool("aborted", true))
	}
	if info.OrgID != uuid.Nil {
		attrs = append(attrs, slog.String("org_id", info.OrgID.String()))
	}
	if info.KeyID != uuid.Nil {
		attrs = append(attrs, slog.String("key_id", info.KeyID.String()))
	}
	if info.Span.IsValid() && !trace.SpanContextFromContext(ctx).IsValid() {
		// An RPC's span began inside (otelconnect): name it here.
		ctx = trace.ContextWithSpanContext(ctx, info.Span)
	}
	slog.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
}

// statusClientClosed is the status a request whose client went away is
// logged with (nginx's convention, as compat's).
const statusClientClosed = 499

// notePattern serves mux and notes the pattern it matched in the request's
// reqinfo.Info, unless an inner layer named the route (an RPC's procedure,
// a console page's pattern). The mux sets the pattern on the request it is
// handed, and a layer between requestLog and it may hand it a copy
// (withCORS, for a visitor's page of another origin): the request counted
// as "unmatched", and its span kept the bare method as its name.
func notePattern(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Deferred: a request whose handler panics is logged by its route too.
		defer func() {
			if info := reqinfo.From(r.Context()); info != nil && info.Route == "" {
				info.Route = r.Pattern
			}
		}()
		mux.ServeHTTP(w, r)
	})
}

// noteGRPCStatus notes the outcome of a gRPC or gRPC-Web call that failed
// before the observing interceptor ran (connect-go refusing a bad envelope,
// codec or message): its code travels in Grpc-Status, a header (gRPC-Web's
// trailers-only answer, or a trailer connect-go declared) or a trailer
// written after the body (http.TrailerPrefix), behind an HTTP 200.
func noteGRPCStatus(info *reqinfo.Info, h http.Header) {
	v := h.Get("Grpc-Status")
	if v == "" {
		v = h.Get(http.TrailerPrefix + "Grpc-Status")
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 {
		return
	}
	noteCode(info, connect.NewError(connect.Code(n), nil))
}

func saneID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// statusRecorder notes the status. Unwrap lets http.ResponseController reach
// the real writer, so flushing and deadlines keep working through it.
// recoverPanics turns a handler's panic into the API's 500 INTERNAL_ERROR,
// logged with its stack, where net/http dropped the connection: the client
// read a reset, and the request had no log line, no request id and no
// metric. A response already begun is aborted instead (http.ErrAbortHandler,
// as is one a handler aborts itself), so that the client sees it cut short
// rather than complete. It runs inside requestLog, whose recorder it writes
// to.
func recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			slog.ErrorContext(r.Context(), "handler panicked", "panic", p, "stack", string(debug.Stack()))
			if rec, ok := w.(*statusRecorder); !ok || rec.wroteHeader {
				panic(http.ErrAbortHandler)
			}
			compat.WriteError(w, r, apperr.New(apperr.Internal, "internal error"))
		}()
		next.ServeHTTP(w, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	// info shares the recorder's allocation.
	info reqinfo.Info
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wroteHeader {
		s.status, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wroteHeader = true
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	// A flush sends the headers (200 unless written): the response has
	// begun, and recoverPanics must abort it rather than answer again.
	s.wroteHeader = true
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// LogHandler adds the request id, and the trace and span ids when the
// context carries a span, to every record.
type LogHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return LogHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h LogHandler) WithGroup(name string) slog.Handler { return LogHandler{h.Handler.WithGroup(name)} }

// noRoute is the error for a request no route of mux serves (mux's "/"
// pattern took it): 405 with an Allow header when the path is a route for
// other methods (a client reading 404 would take the agent for gone), else
// 404.
func noRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) error {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		other := *r
		other.Method = m
		if _, pattern := mux.Handler(&other); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		return apperr.New(apperr.NotFound, "no route for %s %s", r.Method, r.URL.Path)
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	return apperr.New(apperr.MethodNotAllowed, "%s %s: this path takes %s", r.Method, r.URL.Path, strings.Join(allow, ", "))
}
