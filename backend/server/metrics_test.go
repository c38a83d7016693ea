package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/testenv"
)

// scrape reads the metrics listener and parses it with Prometheus's own
// text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// series returns the metric of family name whose labels include want, nil
// when there is none.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// After a chat, a failed model call, an ingestion and a rate-limited
// request, the metrics listener (apart from the API's) has every family
// with its labels and sensible values, and no label names a tenant.
func TestMetricsAfterChatAndRateLimit(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	fake.Reply = func(_ int, body map[string]any) testenv.FakeReply {
		if strings.Contains(fmt.Sprint(body["messages"]), "please fail") {
			return testenv.FakeReply{Status: 500}
		}
		return testenv.FakeReply{Tokens: []string{"Hello", " there."}}
	}
	e := testenv.New(t, testenv.WithWorkers, testenv.WithFakeModels(fake))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.App.ServeMetrics(ctx, ln) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-served) })
	metricsURL := "http://" + ln.Addr().String() + "/metrics"

	// Not on the API's port, nor the profiler, which is on the metrics
	// listener only.
	r := e.Do("GET", "/metrics", "", nil)
	require.Equal(t, http.StatusNotFound, r.Status)
	r = e.Do("GET", "/debug/pprof/goroutine?debug=1", "", nil)
	require.Equal(t, http.StatusNotFound, r.Status)
	pr, err := http.Get("http://" + ln.Addr().String() + "/debug/pprof/goroutine?debug=1")
	require.NoError(t, err)
	goroutines, _ := io.ReadAll(pr.Body)
	pr.Body.Close()
	require.Equal(t, http.StatusOK, pr.StatusCode)
	require.Contains(t, string(goroutines), "goroutine profile:")

	// A chat over Connect, and one the provider fails.
	r = e.Do("POST", "/api/agents", e.A.Key, `{"name":"M","instructions":"Be brief.","model":"gpt-4o"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var agent struct{ ID string }
	r.JSON(t, &agent)
	chat := parleyv1connect.NewChatServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	resp, err := chat.Chat(context.Background(), &parleyv1.ChatRequest{AgentId: agent.ID, ConversationId: "m-1", Query: "hi"})
	require.NoError(t, err)
	require.Equal(t, "Hello there.", resp.GetAnswer())
	_, err = chat.Chat(context.Background(), &parleyv1.ChatRequest{AgentId: agent.ID, ConversationId: "m-2", Query: "please fail"})
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)

	// A key of an enterprise organization allowed one request a minute.
	tiny := e.Bootstrap("Tiny", plan.Enterprise)
	require.NoError(t, account.SetLimits(context.Background(), e.App.Store, tiny.ID, plan.Limits{PerMinute: 1, PerDay: 100}))
	require.Equal(t, 200, e.Do("GET", "/api/agents", tiny.Key, nil).Status)
	require.Equal(t, http.StatusTooManyRequests, e.Do("GET", "/api/agents", tiny.Key, nil).Status)

	// An ingestion job.
	r = e.Do("POST", "/api/datastores", e.A.Key, map[string]any{"name": "docs"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var store struct{ ID string }
	r.JSON(t, &store)
	r = e.Do("POST", "/api/datastores/"+store.ID+"/datasources", e.A.Key, map[string]any{"type": "text", "name": "a", "text": "Opening hours are nine to five."})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)

	// A console page, routed by the console's own mux.
	r = e.Do("GET", "/console/signin", "", nil)
	require.Equal(t, http.StatusOK, r.Status)

	var fams map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		fams = scrape(t, metricsURL)
		// River marks jobs completed in batches, after the attempt ends.
		return series(fams, "parley_job_duration_seconds", map[string]string{"kind": "ingest_datasource", "outcome": "ok"}) != nil &&
			series(fams, "parley_jobs", map[string]string{"state": "completed"}).GetGauge().GetValue() >= 1
	}, 30*time.Second, 100*time.Millisecond, "the ingestion job is counted, and the queue shows it completed")

	// Requests, by procedure or route pattern and the real status class.
	m := series(fams, "parley_request_duration_seconds", map[string]string{"route": parleyv1connect.ChatServiceChatProcedure, "status_class": "2xx"})
	require.NotNil(t, m)
	require.GreaterOrEqual(t, m.GetHistogram().GetSampleCount(), uint64(1))
	m = series(fams, "parley_request_duration_seconds", map[string]string{"route": parleyv1connect.ChatServiceChatProcedure, "status_class": "5xx"})
	require.NotNil(t, m, "the failed chat counts as 503, by its code")
	require.GreaterOrEqual(t, m.GetHistogram().GetSampleCount(), uint64(1))
	m = series(fams, "parley_request_duration_seconds", map[string]string{"route": "GET /api/agents", "status_class": "4xx"})
	require.NotNil(t, m, "the 429 counts under the route pattern")
	m = series(fams, "parley_request_duration_seconds", map[string]string{"route": "POST /api/datastores/{id}/datasources", "status_class": "2xx"})
	require.NotNil(t, m, "routes are patterns, never raw paths")
	m = series(fams, "parley_request_duration_seconds", map[string]string{"route": "GET /console/signin", "status_class": "2xx"})
	require.NotNil(t, m, "a console page counts under the console's pattern, not /console/")
	for _, s := range fams["parley_request_duration_seconds"].GetMetric() {
		for _, l := range s.GetLabel() {
			require.NotContains(t, l.GetValue(), store.ID, "a raw path became a label")
		}
	}

	// The chat turn, its first token, its tokens and cost.
	labels := map[string]string{"provider": "openai", "model": "fake-gpt-4o"}
	turn := series(fams, "parley_chat_turn_duration_seconds", labels)
	require.NotNil(t, turn)
	require.GreaterOrEqual(t, turn.GetHistogram().GetSampleCount(), uint64(1))
	require.Greater(t, turn.GetHistogram().GetSampleSum(), 0.0)
	first := series(fams, "parley_chat_time_to_first_token_seconds", labels)
	require.NotNil(t, first)
	require.GreaterOrEqual(t, first.GetHistogram().GetSampleCount(), uint64(1))
	in := series(fams, "parley_chat_tokens_total", map[string]string{"provider": "openai", "model": "fake-gpt-4o", "plan": "pro", "type": "input"})
	out := series(fams, "parley_chat_tokens_total", map[string]string{"provider": "openai", "model": "fake-gpt-4o", "plan": "pro", "type": "output"})
	require.NotNil(t, in)
	require.NotNil(t, out)
	require.GreaterOrEqual(t, in.GetCounter().GetValue(), 11.0, "the fake provider reports 11 prompt tokens")
	require.GreaterOrEqual(t, out.GetCounter().GetValue(), 5.0)
	cost := series(fams, "parley_chat_cost_dollars_total", map[string]string{"provider": "openai", "model": "fake-gpt-4o", "plan": "pro"})
	require.NotNil(t, cost)
	require.InDelta(t, (11*1.0+5*2.0)/1e6, cost.GetCounter().GetValue(), 1e-5, "1 and 2 dollars per million tokens")

	// The provider's failure, the refusal.
	pe := series(fams, "parley_provider_errors_total", map[string]string{"provider": "openai", "kind": "server_error"})
	require.NotNil(t, pe)
	require.GreaterOrEqual(t, pe.GetCounter().GetValue(), 1.0)
	rl := series(fams, "parley_rate_limit_rejections_total", map[string]string{"plan": "enterprise", "caller": "key"})
	require.NotNil(t, rl)
	require.GreaterOrEqual(t, rl.GetCounter().GetValue(), 1.0)

	// The queue, the pool, the runtime.
	require.Equal(t, 1.0, series(fams, "parley_jobs_queue_up", nil).GetGauge().GetValue())
	require.NotNil(t, series(fams, "parley_jobs", map[string]string{"state": "available"}), "every state is reported, zeros too")
	require.Greater(t, series(fams, "parley_db_pool_max_connections", nil).GetGauge().GetValue(), 0.0)
	require.GreaterOrEqual(t, series(fams, "parley_db_pool_connections", nil).GetGauge().GetValue(), 1.0)
	require.Greater(t, series(fams, "parley_db_pool_acquires_total", nil).GetCounter().GetValue(), 0.0)
	require.NotNil(t, fams["go_goroutines"])
	require.NotNil(t, fams["process_cpu_seconds_total"])

	for name, f := range fams {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				require.NotContains(t, []string{"org", "org_id", "organization", "key", "key_id", "agent", "conversation"}, l.GetName(), "%s has a per-tenant label", name)
			}
		}
	}
}

// The metrics listener serves the profiler, but not the process's command
// line: flags may carry the database's password or the secrets key.
func TestMetricsListenerHidesCommandLine(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.App.ServeMetrics(ctx, ln) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-served) })
	base := "http://" + ln.Addr().String()

	get := func(path string) (int, string) {
		r, err := http.Get(base + path)
		require.NoError(t, err)
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	status, _ := get("/debug/pprof/goroutine?debug=1")
	require.Equal(t, http.StatusOK, status, "the profiler is there")
	status, body := get("/debug/pprof/cmdline")
	require.NotEqual(t, http.StatusOK, status, "the command line is served: %q", body)
	require.NotContains(t, body, os.Args[0])
}

// requestCount is the number of requests the metrics hold of route with
// status class class.
func requestCount(t *testing.T, e *testenv.Env, route, class string) uint64 {
	t.Helper()
	h, err := e.App.MetricsHandler()
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	m := series(scrape(t, srv.URL), "parley_request_duration_seconds", map[string]string{"route": route, "status_class": class})
	return m.GetHistogram().GetSampleCount()
}

// A visitor's chat from a page of another origin counts under its route
// pattern, as a keyed one does: the CORS layer hands the mux a copy of the
// request, and the pattern the mux set on it was lost (the request counted
// as "unmatched"). Not parallel: the counts are the process's.
func TestMetricsRouteOfCrossOriginVisitor(t *testing.T) {
	e := testenv.New(t)
	r := e.Do("POST", "/api/agents", e.A.Key, map[string]any{"name": "W", "instructions": "Be brief.", "visibility": "public", "allowedOrigins": []string{"https://widget.example"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var agent struct{ ID string }
	r.JSON(t, &agent)

	const route = "POST /api/v2/agent/{agentId}/chat"
	before, unmatched := requestCount(t, e, route, "2xx"), requestCount(t, e, "unmatched", "2xx")
	resp := e.Post("/api/v2/agent/"+agent.ID+"/chat", map[string]string{"Origin": "https://widget.example"}, `{"query":"hi","conversationId":"c-w","visitorId":"v-w"}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, before+1, requestCount(t, e, route, "2xx"), "the visitor's chat is not counted under its route")
	require.Equal(t, unmatched, requestCount(t, e, "unmatched", "2xx"))
}

// restStreams is a server whose model replies reply, an agent of it, and
// the REST chat routes (v2, v1) that stream its answers.
func restStreams(t *testing.T, reply testenv.FakeReply) (e *testenv.Env, agentID string, routes []struct{ route, path string }) {
	fake := testenv.NewFakeProvider(t)
	fake.Reply = func(int, map[string]any) testenv.FakeReply { return reply }
	e = testenv.New(t, testenv.WithFakeModels(fake))
	// Not gpt-4o: TestMetricsAfterChatAndRateLimit reads that model's cost
	// whole, and the cut answers' usage is counted too.
	r := e.Do("POST", "/api/agents", e.A.Key, `{"name":"S","instructions":"Be brief.","model":"claude-3-5-sonnet"}`)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var agent struct{ ID string }
	r.JSON(t, &agent)
	return e, agent.ID, []struct{ route, path string }{
		{"POST /api/v2/agent/{agentId}/chat", "/api/v2/agent/" + agent.ID + "/chat"},
		{"POST /api/agents/{agentId}/query", "/api/agents/" + agent.ID + "/query"},
	}
}

// A REST chat stream the model fails mid-answer ends with its error event
// behind the 200 already sent; it counts under the status its error stands
// for (503), as a failed Connect or gRPC stream counts by its code, not as a
// success. Not parallel: the counts are the process's.
func TestMetricsFailedRESTStreamCountsByItsStatus(t *testing.T) {
	e, agentID, routes := restStreams(t, testenv.FakeReply{Tokens: []string{"Partial", " answer", " never", " finished"}, CutAfter: 2})
	for _, tc := range routes {
		ok, failed := requestCount(t, e, tc.route, "2xx"), requestCount(t, e, tc.route, "5xx")
		resp := e.Post(tc.path, map[string]string{"Authorization": "Bearer " + e.A.Key},
			`{"query":"hi","conversationId":"cut-`+agentID[:8]+`","streaming":true}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", tc.path, body)
		require.Contains(t, string(body), "UPSTREAM_ERROR", "%s: the stream ends with the error event", tc.path)
		require.Equal(t, failed+1, requestCount(t, e, tc.route, "5xx"), "%s: the failed stream is not counted as a failure", tc.path)
		require.Equal(t, ok, requestCount(t, e, tc.route, "2xx"), "%s: the failed stream counted as a success", tc.path)
	}
}

// A REST chat stream its client leaves mid-answer counts as 499 (4xx), as a
// Connect stream's "canceled" does, not as a success. Not parallel: the
// counts are the process's.
func TestMetricsLeftRESTStreamCountsAsClientClosed(t *testing.T) {
	e, agentID, routes := restStreams(t, testenv.FakeReply{Tokens: []string{"Partial", " answer", " never", " finished"}, StallAfter: 1})
	for _, tc := range routes {
		ok, left := requestCount(t, e, tc.route, "2xx"), requestCount(t, e, tc.route, "4xx")
		resp := e.Post(tc.path, map[string]string{"Authorization": "Bearer " + e.A.Key},
			`{"query":"hi","conversationId":"left-`+agentID[:8]+`","streaming":true}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, tc.path)
		// Read up to the first token, then leave.
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() && !strings.Contains(lines.Text(), "Partial") {
		}
		require.NoError(t, lines.Err())
		resp.Body.Close()
		require.Eventually(t, func() bool { return requestCount(t, e, tc.route, "4xx") == left+1 }, 30*time.Second, 20*time.Millisecond,
			"%s: the stream its client left is not counted as 499", tc.path)
		require.Equal(t, ok, requestCount(t, e, tc.route, "2xx"), "%s: the stream its client left counted as a success", tc.path)
	}
}
