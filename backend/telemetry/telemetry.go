// Package telemetry installs OpenTelemetry tracing when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set,
// exporting spans over OTLP/HTTP (protobuf); otherwise it installs nothing,
// and the span helpers here return at once without allocating. It also
// holds the span helpers of Parley's own operations: model calls (with the
// GenAI semantic conventions), tool calls and background jobs.
//
// It must never put prompts, answers, tool arguments or keys in a span.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// instrumentation names Parley's own spans.
const instrumentation = "github.com/parleyhq/parley"

var enabled atomic.Bool

// Enabled reports whether Setup installed a tracer provider.
func Enabled() bool { return enabled.Load() }

// Configured reports whether the environment asks for traces.
func Configured() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the global tracer provider and the W3C trace-context
// propagator when Configured, and returns the function that flushes and
// stops it (a no-op when nothing was installed). The exporter reads the
// standard OTEL_EXPORTER_OTLP_* variables (endpoint, headers, timeout), the
// SDK OTEL_TRACES_SAMPLER and OTEL_BSP_*, the resource OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES (service.name defaults to "parley").
func Setup(ctx context.Context) (shutdown func(context.Context) error, err error) {
	if !Configured() {
		return func(context.Context) error { return nil }, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" && p != "http/protobuf" {
			return nil, fmt.Errorf("%s=%q: Parley exports traces over OTLP/HTTP only; set http/protobuf (the collector's port 4318)", v, p)
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", "parley")),
		resource.Environment(),
	)
	if err != nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { slog.Warn("tracing", "err", err) }))
	enabled.Store(true)
	slog.Info("tracing", "exporter", "otlp/http")
	return func(ctx context.Context) error {
		enabled.Store(false)
		return tp.Shutdown(ctx)
	}, nil
}

func tracer() trace.Tracer { return otel.Tracer(instrumentation) }

// off is the span of disabled tracing: an empty struct, so returning it as
// a trace.Span does not allocate.
var off trace.Span = noop.Span{}

// GenAI semantic-convention attributes
// (opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/).
// gen_ai.system is the older name of gen_ai.provider.name; both are set,
// for backends of either generation.
const (
	genAIOperation    = attribute.Key("gen_ai.operation.name")
	genAISystem       = attribute.Key("gen_ai.system")
	genAIProvider     = attribute.Key("gen_ai.provider.name")
	genAIRequestModel = attribute.Key("gen_ai.request.model")
	genAITemperature  = attribute.Key("gen_ai.request.temperature")
	genAIInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	genAIOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	genAIToolName     = attribute.Key("gen_ai.tool.name")
	genAIToolCallID   = attribute.Key("gen_ai.tool.call.id")
	errorType         = attribute.Key("error.type")
)

// StartModelCall starts the client span of one call to a model provider,
// named as the GenAI conventions say ("chat gpt-4o").
func StartModelCall(ctx context.Context, provider, model string, temperature float64) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, off
	}
	return tracer().Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		genAIOperation.String("chat"), genAISystem.String(provider), genAIProvider.String(provider),
		genAIRequestModel.String(model), genAITemperature.Float64(temperature)))
}

// EndModelCall ends a model call's span with its token usage (negative:
// not reported) and error.
func EndModelCall(span trace.Span, inputTokens, outputTokens int64, err error) {
	if !span.IsRecording() {
		return
	}
	if inputTokens >= 0 {
		span.SetAttributes(genAIInputTokens.Int64(inputTokens), genAIOutputTokens.Int64(outputTokens))
	}
	fail(span, err)
	span.End()
}

// StartToolCall starts the span of running one tool call.
func StartToolCall(ctx context.Context, name, callID string) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, off
	}
	return tracer().Start(ctx, "execute_tool "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		genAIOperation.String("execute_tool"), genAIToolName.String(name), genAIToolCallID.String(callID)))
}

// EndToolCall ends a tool call's span; failed is a call that ran and
// reported an error to the model, err one that could not run.
func EndToolCall(span trace.Span, failed bool, err error) {
	if !span.IsRecording() {
		return
	}
	if err == nil && failed {
		span.SetStatus(codes.Error, "the tool reported an error")
	}
	fail(span, err)
	span.End()
}

// StartJob starts the span of one attempt of a background job: a new trace
// (a job outlives the request that enqueued it).
func StartJob(ctx context.Context, kind string, id int64, attempt int) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, off
	}
	return tracer().Start(ctx, "job "+kind, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithNewRoot(), trace.WithAttributes(
		attribute.String("messaging.system", "river"), attribute.String("river.job.kind", kind),
		attribute.Int64("river.job.id", id), attribute.Int("river.job.attempt", attempt)))
}

// EndJob ends a job attempt's span.
func EndJob(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	fail(span, err)
	span.End()
}

func fail(span trace.Span, err error) {
	if err == nil {
		return
	}
	kind := "error"
	switch {
	case errors.Is(err, context.Canceled):
		kind = "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		kind = "timeout"
	}
	span.SetAttributes(errorType.String(kind))
	span.SetStatus(codes.Error, kind)
}
