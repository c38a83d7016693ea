package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// registry holds the process-wide metrics; per-instance collectors (the
// pool, the job queue) join them in Handler.
var registry = prometheus.NewRegistry()

// Buckets of request and turn durations: from a cached read (a few ms) to a
// long stream (minutes).
var durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

var (
	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "parley_request_duration_seconds",
		Help:    "Time to serve a request (a stream: until it ends), by route (RPC procedure or REST route pattern) and status class (of the real status: a failed gRPC call counts by its code).",
		Buckets: durationBuckets,
	}, []string{"route", "status_class"})

	turnDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "parley_chat_turn_duration_seconds",
		Help:    "Time of a chat turn from admission to the stored answer, by provider and upstream model.",
		Buckets: durationBuckets,
	}, []string{"provider", "model"})

	firstToken = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "parley_chat_time_to_first_token_seconds",
		Help:    "Time from the start of a chat turn to the first text the model produced, by provider and upstream model.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60},
	}, []string{"provider", "model"})

	tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_chat_tokens_total",
		Help: "Tokens of chat turns, by provider, upstream model, plan of the organization and type (input: the prompt, output: the answer).",
	}, []string{"provider", "model", "plan", "type"})

	cost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_chat_cost_dollars_total",
		Help: "Cost of chat turns at the catalog's prices (US dollars), by provider, upstream model and plan.",
	}, []string{"provider", "model", "plan"})

	rateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_rate_limit_rejections_total",
		Help: "Requests refused for a rate limit, by plan and caller (key: an API key; visitor: a caller of a public agent or form, counted on its owner's plan).",
	}, []string{"plan", "caller"})

	turnRejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_chat_turn_rejections_total",
		Help: "Chat turns refused with 503 OVERLOADED by the turn admission queue, by reason (queue_full: the wait list was full; queue_wait: a slot did not free within the turn's timeout; attachments_wait: no room for its attachments freed within it; org_share: its organization already held its share of the slots and waiting places).",
	}, []string{"reason"})

	providerErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_provider_errors_total",
		Help: "Failed model calls (after retries), by provider and kind: rate_limited, server_error, client_error, timeout, connection, other.",
	}, []string{"provider", "kind"})

	jobDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "parley_job_duration_seconds",
		Help:    "Time of a background job attempt (River), by kind and outcome (ok, error: to be retried or discarded, cancelled: permanent failure, snoozed: put back to wait, no attempt spent). Its _count is the attempts.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
	}, []string{"kind", "outcome"})
)

func init() {
	registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		requestDuration, turnDuration, firstToken, tokens, cost, rateLimited, turnRejections, providerErrors, jobDuration,
	)
}

// Handler serves the metrics in the Prometheus text (or OpenMetrics)
// format: the process-wide ones and extra, this instance's collectors.
func Handler(extra ...prometheus.Collector) (http.Handler, error) {
	local := prometheus.NewRegistry()
	for _, c := range extra {
		if err := local.Register(c); err != nil {
			return nil, err
		}
	}
	return promhttp.HandlerFor(prometheus.Gatherers{registry, local}, promhttp.HandlerOpts{
		// A collector that fails (the database gone) leaves its metrics out
		// rather than failing the whole scrape.
		ErrorHandling: promhttp.ContinueOnError,
		Timeout:       10 * time.Second,
	}), nil
}

// statusClasses are the status_class label values, by status/100; 0 is
// anything outside 1xx..5xx.
var statusClasses = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

// routeObservers are the request histogram's observers of each route,
// curried once per route so that a request pays a read-locked map lookup and
// no allocation.
var routeObservers = struct {
	sync.RWMutex
	m map[string]*[6]prometheus.Observer
}{m: map[string]*[6]prometheus.Observer{}}

// Request records a served request: route is the RPC procedure or the REST
// route pattern (empty: no route matched), status the real status.
func Request(route string, status int, took time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	routeObservers.RLock()
	obs := routeObservers.m[route]
	routeObservers.RUnlock()
	if obs == nil {
		obs = curry(route)
	}
	class := status / 100
	if class < 1 || class > 5 {
		class = 0
	}
	obs[class].Observe(took.Seconds())
}

func curry(route string) *[6]prometheus.Observer {
	routeObservers.Lock()
	defer routeObservers.Unlock()
	if obs := routeObservers.m[route]; obs != nil {
		return obs
	}
	obs := new([6]prometheus.Observer)
	for i, c := range statusClasses {
		obs[i] = requestDuration.WithLabelValues(route, c)
	}
	routeObservers.m[route] = obs
	return obs
}

// Turn records a finished chat turn.
func Turn(provider, model string, took time.Duration) {
	turnDuration.WithLabelValues(provider, model).Observe(took.Seconds())
}

// FirstToken records the time to a turn's first text.
func FirstToken(provider, model string, took time.Duration) {
	firstToken.WithLabelValues(provider, model).Observe(took.Seconds())
}

// Usage adds a turn's tokens and cost. plan is the organization's plan.
func Usage(provider, model, plan string, input, output int64, dollars float64) {
	if plan == "" {
		plan = "unknown"
	}
	// A counter panics on a negative value: a provider's (an
	// OpenAI-compatible server's) wrong count must not fail the turn.
	tokens.WithLabelValues(provider, model, plan, "input").Add(float64(max(input, 0)))
	tokens.WithLabelValues(provider, model, plan, "output").Add(float64(max(output, 0)))
	cost.WithLabelValues(provider, model, plan).Add(max(dollars, 0))
}

// RateLimited counts a refusal. caller is "key" or "visitor"; plan may be
// empty when the owner's plan is not at hand ("unknown").
func RateLimited(plan, caller string) {
	if plan == "" {
		plan = "unknown"
	}
	rateLimited.WithLabelValues(plan, caller).Inc()
}

// TurnRejected counts a chat turn the admission queue refused; reason is
// "queue_full", "queue_wait", "attachments_wait" or "org_share".
func TurnRejected(reason string) {
	turnRejections.WithLabelValues(reason).Inc()
}

// ProviderError counts a failed model call; kind is one of ProviderErrorKind's.
func ProviderError(provider, kind string) {
	providerErrors.WithLabelValues(provider, kind).Inc()
}

// ProviderErrorKind classifies a provider failure by its upstream status (0:
// none was received) and whether the call timed out.
func ProviderErrorKind(status int, timedOut bool) string {
	switch {
	case timedOut:
		return "timeout"
	case status == http.StatusTooManyRequests:
		return "rate_limited"
	case status >= 500:
		return "server_error"
	case status >= 400:
		return "client_error"
	case status == 0:
		return "connection"
	}
	return "other"
}

// Job records one attempt of a background job.
func Job(kind, outcome string, took time.Duration) {
	jobDuration.WithLabelValues(kind, outcome).Observe(took.Seconds())
}
