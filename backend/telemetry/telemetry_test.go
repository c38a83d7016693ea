package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/telemetry"
	"github.com/parleyhq/parley/backend/testenv"
)

// receiver is an OTLP/HTTP trace receiver (protobuf), as a collector runs
// on port 4318.
type receiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != "POST" || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			rc.spans = append(rc.spans, ss.GetSpans()...)
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (rc *receiver) named(name string) []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rc.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

func (rc *receiver) children(parent *tracepb.Span) []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rc.spans {
		if string(s.GetParentSpanId()) == string(parent.GetSpanId()) && string(s.GetTraceId()) == string(parent.GetTraceId()) {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue()
		}
	}
	return nil
}

// Without OTEL_EXPORTER_OTLP_ENDPOINT nothing is installed, and a span
// helper costs nothing.
func TestTracingOffByDefault(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	shutdown, err := telemetry.Setup(context.Background())
	require.NoError(t, err)
	require.NoError(t, shutdown(context.Background()))
	require.False(t, telemetry.Enabled())
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, span := telemetry.StartModelCall(ctx, "openai", "gpt-4o", 0.2)
		telemetry.EndModelCall(span, 10, 5, nil)
		_, span = telemetry.StartToolCall(c, "web_search", "call_1")
		telemetry.EndToolCall(span, false, nil)
	})
	require.Zero(t, allocs)
}

// With the endpoint set, a chat's RPC span reaches the OTLP receiver with
// the provider call as its child (GenAI attributes: model, provider, token
// usage) and the database queries; a REST request gets a span named by its
// route pattern; an ingestion job a span of its own.
func TestTracesExportedOverOTLP(t *testing.T) {
	rc := &receiver{}
	collector := httptest.NewServer(rc)
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "parley-test")
	shutdown, err := telemetry.Setup(context.Background())
	require.NoError(t, err)
	require.True(t, telemetry.Enabled())
	flushed := false
	defer func() {
		if !flushed {
			_ = shutdown(context.Background())
		}
	}()

	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithWorkers, testenv.WithFakeModels(fake))
	r := e.Do("POST", "/api/agents", e.A.Key, `{"name":"T","instructions":"Be brief.","model":"gpt-4o"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var agent struct{ ID string }
	r.JSON(t, &agent)
	chat := parleyv1connect.NewChatServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	_, err = chat.Chat(context.Background(), &parleyv1.ChatRequest{AgentId: agent.ID, ConversationId: "t-1", Query: "hi"})
	require.NoError(t, err)
	require.Equal(t, 200, e.Do("GET", "/api/agents/"+agent.ID, e.A.Key, nil).Status)
	r = e.Do("POST", "/api/datastores", e.A.Key, map[string]any{"name": "docs"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var store struct{ ID string }
	r.JSON(t, &store)
	r = e.Do("POST", "/api/datastores/"+store.ID+"/datasources", e.A.Key, map[string]any{"type": "text", "name": "a", "text": "Opening hours are nine to five."})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	// Wait for the job's span to be exported (the batcher flushes every
	// few seconds), then flush the rest.
	require.Eventually(t, func() bool { return len(rc.named("job ingest_datasource")) > 0 }, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, shutdown(context.Background()))
	flushed = true

	rpcs := rc.named("parley.v1.ChatService/Chat")
	require.Len(t, rpcs, 1, "one span for the RPC")
	rpc := rpcs[0]
	require.Equal(t, tracepb.Span_SPAN_KIND_SERVER, rpc.GetKind())
	var call, query *tracepb.Span
	for _, c := range rc.children(rpc) {
		switch {
		case c.GetName() == "chat fake-gpt-4o":
			call = c
		case c.GetName() == "GetAgent":
			query = c
		}
	}
	require.NotNil(t, call, "the provider call is a child of the RPC's span")
	require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, call.GetKind())
	require.Equal(t, "fake-gpt-4o", attr(call, "gen_ai.request.model").GetStringValue())
	require.Equal(t, "openai", attr(call, "gen_ai.system").GetStringValue())
	require.Equal(t, "chat", attr(call, "gen_ai.operation.name").GetStringValue())
	require.EqualValues(t, 11, attr(call, "gen_ai.usage.input_tokens").GetIntValue())
	require.EqualValues(t, 5, attr(call, "gen_ai.usage.output_tokens").GetIntValue())
	require.NotNil(t, query, "database queries are children of the RPC's span (otelpgx), named by their sqlc query")
	require.Nil(t, attr(query, "db.query.parameters"), "query parameters are never recorded")

	rest := rc.named("GET /api/agents/{agentId}")
	require.NotEmpty(t, rest, "a REST request's span is named by its route pattern")
	require.Equal(t, tracepb.Span_SPAN_KIND_SERVER, rest[0].GetKind())
	require.Empty(t, rc.named("GET /healthz"))
	job := rc.named("job ingest_datasource")[0]
	require.Equal(t, "ingest_datasource", attr(job, "river.job.kind").GetStringValue())
	require.NotEmpty(t, rc.children(job), "the job's queries are its children")
}

// A tool call's span names the tool only when the agent has it: a name the
// model made up is its text (here repeating what a visitor said), which no
// span may hold.
func TestToolSpanHoldsNoMadeUpName(t *testing.T) {
	rc := &receiver{}
	collector := httptest.NewServer(rc)
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	shutdown, err := telemetry.Setup(context.Background())
	require.NoError(t, err)
	flushed := false
	defer func() {
		if !flushed {
			_ = shutdown(context.Background())
		}
	}()

	const said = "my_card_is_4111111111111111"
	fake := testenv.NewFakeProvider(t)
	fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 1 {
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: said, Arguments: `{}`},
				{ID: "call_2", Name: "lead_capture", Arguments: `{"email":"ann@example.com"}`},
			}}
		}
		return testenv.FakeReply{Tokens: []string{"Done."}}
	}
	e := testenv.New(t, testenv.WithFakeModels(fake))
	r := e.Do("POST", "/api/agents", e.A.Key, map[string]any{"name": "T", "instructions": "Be brief.", "model": "gpt-4o", "tools": []string{"lead_capture"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var agent struct{ ID string }
	r.JSON(t, &agent)
	chat := parleyv1connect.NewChatServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	_, err = chat.Chat(context.Background(), &parleyv1.ChatRequest{AgentId: agent.ID, ConversationId: "t-1", Query: "hi"})
	require.NoError(t, err)
	require.NoError(t, shutdown(context.Background()))
	flushed = true

	require.Len(t, rc.named("execute_tool lead_capture"), 1, "a tool the agent has is named")
	unknown := rc.named("execute_tool unknown")
	require.Len(t, unknown, 1)
	require.Equal(t, "unknown", attr(unknown[0], "gen_ai.tool.name").GetStringValue())
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, s := range rc.spans {
		require.NotContains(t, s.GetName(), said)
		for _, a := range s.GetAttributes() {
			require.NotContains(t, a.GetValue().GetStringValue(), said, "span %s, attribute %s", s.GetName(), a.GetKey())
		}
	}
}
