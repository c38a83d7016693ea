// Package server wires Parley together: configuration, the Postgres pool and
// migrations, the gate (authentication and rate limits), the Connect services
// with their validation, the REST compatibility paths, health and readiness,
// and an HTTP server that speaks HTTP/1.1 and cleartext HTTP/2 (h2c, so gRPC
// works without TLS) and drains on shutdown.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"connectrpc.com/otelconnect"
	"connectrpc.com/validate"
	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/parleyhq/parley/backend/access"
	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/agent"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/chat"
	"github.com/parleyhq/parley/backend/contact"
	"github.com/parleyhq/parley/backend/conversation"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/form"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/jobs"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/metrics"
	"github.com/parleyhq/parley/backend/netguard"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/backend/seal"
	"github.com/parleyhq/parley/backend/telemetry"
	"github.com/parleyhq/parley/backend/tool"
	"github.com/parleyhq/parley/backend/webhook"
	"github.com/parleyhq/parley/compat"
	"github.com/parleyhq/parley/compat/wire"
	"github.com/parleyhq/parley/console"
)

// jobsMaxConns is the size of River's own pool: its listener holds one,
// the elector, the producers and the completer share the rest (they batch).
const jobsMaxConns = 4

// App is a configured Parley instance: its handler and what it holds open.
type App struct {
	cfg  Config
	Pool *pgxpool.Pool
	// jobsPool is River's own (jobsMaxConns), apart from Pool.
	jobsPool *pgxpool.Pool
	Store    *db.Store
	Auth     *auth.Authenticator
	Limits   *ratelimit.Limiter
	redis    *redis.Client
	handler  http.Handler
	catalog  *llm.Catalog
	K        *knowledge.Knowledge
	jobs     *jobs.Client
	// hooks emits webhook events; sealer seals their secrets and
	// http_request's header values (nil without --secrets-key).
	hooks  *webhook.Emitter
	sealer *seal.Sealer
	// turnQueue admits chat turns (--max-turns, --turn-queue).
	turnQueue *chat.TurnQueue
	// hub wakes the conversations' watch streams and console the web
	// console: Close stops what they run in the background.
	hub     *conversation.Hub
	console *console.Console

	// drain ends when shutdown begins in earnest: running chat turns stop
	// their model calls and send a final event.
	drain      context.Context
	startDrain context.CancelFunc
	// stopping ends as soon as shutdown begins: conversations' watch
	// streams end then (their clients resume where they left off,
	// elsewhere) rather than hold the instance until the drain.
	stopping      context.Context
	startStopping context.CancelFunc

	migrated atomic.Bool
	// pendingCheck lets one readiness check at a time read the migration
	// state, which opens a connection of its own (db.Pending).
	pendingCheck chan struct{}
}

// New opens the database (migrating it unless cfg.Migrate is false), the
// rate-limit store, and builds the handler.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	if cfg.TurnTimeout < 0 {
		return nil, fmt.Errorf("--turn-timeout %s: give a positive duration, or 0 for no bound", cfg.TurnTimeout)
	}
	if cfg.MaxTurns < 0 || cfg.TurnQueue < 0 {
		return nil, fmt.Errorf("--max-turns %d, --turn-queue %d: give positive counts, or 0 for the defaults", cfg.MaxTurns, cfg.TurnQueue)
	}
	if cfg.OrgTurnShare < 0 || cfg.OrgTurnShare > 100 {
		return nil, fmt.Errorf("--org-turn-share %d: give a percentage from 1 to 100 (100: no bound), or 0 for the default", cfg.OrgTurnShare)
	}
	if cfg.OrgStreams < 0 {
		return nil, fmt.Errorf("--org-streams %d: give a positive count, or 0 for no bound", cfg.OrgStreams)
	}
	a := &App{cfg: cfg, pendingCheck: make(chan struct{}, 1)}
	a.turnQueue = chat.NewTurnQueue(cfg.TurnLimits()).ShareByOrg(cfg.OrgShare()).LimitLoads(cfg.LoadLimit()).LimitAttachments(chat.AttachmentsInFlight)
	a.drain, a.startDrain = context.WithCancel(context.Background())
	a.stopping, a.startStopping = context.WithCancel(context.Background())
	a.catalog = cfg.Catalog
	if a.catalog == nil {
		c, err := llm.LoadCatalog(llm.CatalogConfig{File: cfg.ModelsFile})
		if err != nil {
			return nil, err
		}
		a.catalog = c
	}
	for name, served := range a.catalog.Describe() {
		slog.Info("model route", "model", name, "served_by", served)
	}
	if cfg.Migrate {
		res, err := db.Migrate(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		for _, r := range res {
			slog.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "took", r.Duration)
		}
	}
	tracer := cfg.DBTracer
	if tracer == nil && telemetry.Enabled() {
		// Queries are traced within a traced request or job only (otelpgx
		// starts no span without a recording parent): River's polling
		// makes none. Query parameters are never recorded. (The pool finds
		// its acquire tracer on the same value.)
		tracer = otelpgx.NewTracer(otelpgx.WithSpanNameFunc(db.QueryName), otelpgx.WithDisableConnectionDetailsInAttributes())
	}
	pool, err := db.Open(ctx, cfg.DatabaseURL, cfg.DBMaxConns, tracer)
	if err != nil {
		return nil, err
	}
	if err := db.CheckRole(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	a.Pool = pool
	a.Store = &db.Store{Pool: pool}
	// River's own connections (its LISTEN, leader election, job fetching
	// and completion), so that they never queue behind chat turns in Pool:
	// under 5,000 streams River's elector and producer timed out waiting
	// for one (issue 13). Jobs' own work (ingestion, deliveries) still uses
	// Store. Opened lazily: an instance running no jobs opens none.
	jcfg := pool.Config()
	jcfg.MaxConns = jobsMaxConns
	jcfg.MinConns = 0
	if a.jobsPool, err = pgxpool.NewWithConfig(ctx, jcfg); err != nil {
		a.Close()
		return nil, err
	}
	if cfg.RedisURL != "" {
		opts, err := redisOptions(cfg.RedisURL)
		if err != nil {
			a.Close()
			return nil, err
		}
		redisLogOnce.Do(func() { redis.SetLogger(redisLog{}) })
		a.redis = redis.NewClient(opts)
		// A Redis that does not answer is an outage, not a configuration
		// error: this instance starts and counts on its own until Redis is
		// back, as a running one does, rather than leaving a restart or a
		// scale-up during the outage without an API.
		if err := a.redis.Ping(ctx).Err(); redisRefusesURL(err) {
			// It answers, and refuses the URL's password or database:
			// no outage to wait out, but a setting that never works (every
			// instance counting on its own for good, a warning every 30 s).
			a.Close()
			return nil, fmt.Errorf("--redis-url %s: redis refuses it: %w", RedactURL(cfg.RedisURL), err)
		} else if err != nil {
			slog.Warn("redis does not answer; rate limits count per instance until it does", "addr", opts.Addr, "err", err)
		}
		if a.Limits, err = ratelimit.NewRedis(a.redis, cfg.RedisPrefix); err != nil {
			a.Close()
			return nil, err
		}
	} else {
		a.Limits = ratelimit.NewMemory()
	}
	a.Auth = auth.NewAuthenticator(a.Store)
	a.Store.OrgGone = a.Auth.ForgetOrg
	if err := a.knowledge(); err != nil {
		a.Close()
		return nil, err
	}
	a.handler, err = a.routes()
	if err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// redisRefusesURL reports whether err is Redis's answer refusing what the
// URL asks for (its user and password, its database number), rather than an
// outage (no answer, or LOADING, READONLY and the like, which pass). NOPERM
// passes too: a user allowed the rate limits' commands may not be allowed
// PING.
func redisRefusesURL(err error) bool {
	for _, prefix := range []string{
		"WRONGPASS", "NOAUTH", "AUTH", "invalid password", "Client sent AUTH",
		"DB index is out of range", "invalid DB index",
	} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// redisOptions are the options of the Redis client for rawURL. A Redis that
// stops answering must not hold requests for long: rate limits then fall
// back to this instance (ratelimit.Limiter) within these bounds (300 ms a
// try, one retry), unless the URL sets its own.
func redisOptions(rawURL string) (*redis.Options, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, checkRedisURL(rawURL) // Err refused it already
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 300 * time.Millisecond
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = 300 * time.Millisecond
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = 300 * time.Millisecond
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 1
	}
	// One dial a try: go-redis dials up to five times (100 ms apart) before
	// a try fails, so a Redis host gone from the network (its packets
	// dropped: each dial waits DialTimeout) held a request 3.8 s, twice
	// five dials, and a refused port 0.8 s. A URL cannot set this.
	opts.DialerRetries = 1
	return opts, nil
}

// redisLog takes go-redis's own messages (a failed dial, a pool's
// trouble) into the JSON log, at debug level: its default logger wrote them
// as plain lines among the JSON records on stderr, one per failed dial while
// Redis was down, where the rate limiter already warns every 30 s, with
// the cause.
// go-redis keeps one logger for the process: set once, before any client
// that might log (a later write would race with their reads).
type redisLog struct{}

var redisLogOnce sync.Once

func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, "redis client", "detail", strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}

// knowledge sets up ingestion and search: the embedder of new datastores,
// the guarded web fetcher, and River (running jobs only when cfg.Workers > 0).
func (a *App) knowledge() error {
	// The default (an empty name: tests) is the fast lexical embedder; the
	// serve flag's default is the neural one.
	def, all, err := embed.New(a.cfg.Embeddings)
	if err != nil {
		return fmt.Errorf("--embeddings: %w", err)
	}
	if a.cfg.Embedder != nil {
		def = a.cfg.Embedder
		all = append(all, def)
	}
	a.K = knowledge.New(a.Store, def, netguard.New(netguard.Config{Allow: a.cfg.FetchAllow}), all...)
	if a.cfg.SearchEf > 0 {
		a.K.EfSearch = min(a.cfg.SearchEf, 1000)
	}
	a.K.ExactBelow, a.K.ExactMax = int64(a.cfg.SearchExactBelow), int64(a.cfg.SearchExactMax)
	if a.sealer, err = a.cfg.Sealer(); err != nil {
		return err
	}
	deliverer := &webhook.Deliverer{Store: a.Store, Sealer: a.sealer, Guard: webhook.NewGuard(netguard.Config{Allow: a.cfg.FetchAllow})}
	if a.sealer == nil {
		deliverer = nil // no endpoint can exist without the key
	}
	// A turn is over by its TurnTimeout from its arrival, its answer
	// stored within a few seconds more (chat's storeTimeout): the late
	// pass of a deletion's forgetting comes a minute after that. Turns
	// without a bound get the default.
	var late time.Duration
	if a.cfg.TurnTimeout > 0 {
		late = a.cfg.TurnTimeout + time.Minute
	}
	a.jobs, err = jobs.New(a.jobsPool, a.K, jobs.Config{
		Workers:    a.cfg.Workers > 0,
		MaxWorkers: a.cfg.Workers,
		Logger:     slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Webhooks:   deliverer,
		Store:      a.Store,

		WebhookRetention: a.cfg.WebhookRetention,
		LateAnswers:      late,
	})
	if err != nil {
		return err
	}
	a.hooks = &webhook.Emitter{Jobs: a.jobs}
	a.K.Hooks = a.hooks
	return nil
}

// RunWorkers runs jobs (ingestion, webhook deliveries) until ctx ends (parley worker, and within
// Serve when cfg.Workers > 0), then stops within the shutdown timeout: no
// new job is taken, and those still running at drainAt are cancelled for
// River to retry. With no workers it only waits for ctx.
func (a *App) RunWorkers(ctx context.Context) error {
	if !a.awaitMigrations(ctx) {
		return nil // stopped before they were applied
	}
	return a.jobs.Run(ctx, drainAt(a.cfg.ShutdownTimeout), a.cfg.ShutdownTimeout)
}

// drainAt is when, within a shutdown of grace, chat turns still running are
// ended and jobs still running are cancelled: 2 s before its end (half of it
// under 4 s), for them to store what they did and return.
func drainAt(grace time.Duration) time.Duration {
	return max(grace-2*time.Second, grace/2)
}

func (a *App) routes() (http.Handler, error) {
	rules, err := protovalidate.New()
	if err != nil {
		return nil, err
	}
	// SECURITY: an over-long list is one violation, not one per item (wire.Bounded).
	validator := wire.Bounded(rules)
	gate := &auth.Gate{Auth: a.Auth, Limits: a.Limits}
	var interceptors []connect.Interceptor
	if telemetry.Enabled() {
		// Outermost, so that the RPC's span covers all the rest. Its
		// metrics are off: Prometheus has them (backend/metrics). A remote
		// parent is linked, not joined: callers are the public.
		otc, err := otelconnect.NewInterceptor(otelconnect.WithoutMetrics())
		if err != nil {
			return nil, err
		}
		interceptors = append(interceptors, otc)
	}
	interceptors = append(interceptors,
		observeInterceptor{},
		errorInterceptor{},
		// Who gets in: each method's rule, declared in the schema.
		access.Interceptor{Gate: gate},
		// Before the schema's rules: it refuses a message nested too
		// deeply, which protovalidate's walk would read whole.
		nulInterceptor{},
		validate.NewInterceptor(validate.WithValidator(wire.NameRuleFields(validator))),
	)
	opts := []connect.HandlerOption{
		connect.WithInterceptors(interceptors...),
		readLimit(wire.MaxMessageBytes),
		// Compressing replies of a few hundred bytes costs more CPU than
		// it saves on the wire.
		connect.WithCompressMinBytes(1 << 10),
	}
	tools := &tool.Deps{
		Store: a.Store, Knowledge: a.K, Search: tool.NewSearcher(a.cfg.WebSearch),
		Guard: tool.NewGuard(netguard.Config{Allow: a.cfg.FetchAllow}),
		Hooks: a.hooks, Sealer: a.sealer,
	}
	if tools.Search != nil {
		slog.Info("web search", "backend", tools.Search.Backend())
	}
	agentCache := agent.NewCache(a.Store)
	agents := agent.NewHandler(a.Store, tools, agentCache)
	accounts := account.New(a.Store, a.Auth, a.Limits)
	admitter := &chat.Admitter{Store: a.Store, Gate: gate, Agents: agentCache}
	turns := &chat.Service{
		Store: a.Store, Catalog: a.catalog, Drain: a.drain, Knowledge: a.K, Tools: tools, TurnTimeout: a.cfg.TurnTimeout,
		Queue: a.turnQueue,
		// SECURITY: not FetchAllow: that opens ranges to what an
		// organization's admins configure, and attachments are any
		// caller's URLs, a public agent's keyless visitors' too.
		Fetch: chat.NewAttachmentFetcher(netguard.Config{Allow: a.cfg.AttachmentFetchAllow}), Hooks: a.hooks,
	}
	uploads := knowledge.NewUploadBudget(cmp.Or(a.cfg.UploadBudget, knowledge.UploadBudgetBytes), cmp.Or(a.cfg.UploadWait, knowledge.UploadWait))
	datastores := &knowledge.Service{K: a.K, Jobs: a.jobs, Uploads: uploads}
	forms := &form.Service{Store: a.Store, Gate: gate, Hooks: a.hooks}
	a.hub = conversation.NewHub(a.Pool, a.Store)
	conversations := &conversation.Service{Admit: admitter, Store: a.Store, Live: a.hub, Drain: a.stopping, Hooks: a.hooks, Heartbeat: a.cfg.WatchHeartbeat,
		OrgStreams: a.cfg.OrgStreams}
	contacts := &contact.Service{Store: a.Store}
	webhooks := &webhook.Service{
		Store: a.Store, Sealer: a.sealer, Hooks: a.hooks,
		Guard: webhook.NewGuard(netguard.Config{Allow: a.cfg.FetchAllow}),
	}

	mux := http.NewServeMux()
	mux.Handle(parleyv1connect.NewAgentServiceHandler(agents, opts...))
	mux.Handle(parleyv1connect.NewApiKeyServiceHandler(accounts, opts...))
	mux.Handle(parleyv1connect.NewOrganizationServiceHandler(accounts, opts...))
	// A datasource's file travels in its message: the service takes larger ones.
	dsPath, dsHandler := parleyv1connect.NewDatastoreServiceHandler(datastores, append(slices.Clip(opts), readLimit(knowledge.MaxMessageBytes))...)
	mux.Handle(dsPath, dsHandler)
	// The key is checked before the upload takes room in the budget: a
	// keyless call held it as long as its body took to come.
	mux.Handle(parleyv1connect.DatastoreServiceCreateDatasourceProcedure, access.Keyed(a.Auth,
		parleyv1connect.DatastoreServiceCreateDatasourceProcedure, uploads.Holding(knowledge.MaxMessageBytes, dsHandler)))
	chatPath, chatHandler := parleyv1connect.NewChatServiceHandler(chat.NewHandler(admitter, turns), opts...)
	mux.Handle(chatPath, chatHandler)
	convPath, convHandler := parleyv1connect.NewConversationServiceHandler(conversations, opts...)
	mux.Handle(convPath, convHandler)
	// The streaming RPCs' writes have deadlines (writeDeadlines).
	writeTimeout := cmp.Or(a.cfg.StreamWriteTimeout, streamWriteTimeout)
	mux.Handle(parleyv1connect.ChatServiceChatStreamProcedure, writeDeadlines(chatHandler, writeTimeout))
	mux.Handle(parleyv1connect.ConversationServiceWatchConversationProcedure, writeDeadlines(convHandler, writeTimeout))
	mux.Handle(parleyv1connect.NewContactServiceHandler(contacts, opts...))
	mux.Handle(parleyv1connect.NewFormServiceHandler(form.NewHandler(forms), opts...))
	mux.Handle(parleyv1connect.NewWebhookServiceHandler(webhooks, opts...))
	services := []string{
		parleyv1connect.AgentServiceName, parleyv1connect.ApiKeyServiceName, parleyv1connect.OrganizationServiceName,
		parleyv1connect.ChatServiceName, parleyv1connect.ConversationServiceName, parleyv1connect.DatastoreServiceName,
		parleyv1connect.ContactServiceName,
		parleyv1connect.FormServiceName,
		parleyv1connect.WebhookServiceName,
	}
	// Anyone may call these: they read no more than the services do.
	mux.Handle(grpchealth.NewHandler(readiness{app: a, services: grpchealth.NewStaticChecker(services...)}, readLimit(wire.MaxMessageBytes)))
	reflector := grpcreflect.NewStaticReflector(services...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, readLimit(wire.MaxMessageBytes)))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, readLimit(wire.MaxMessageBytes)))

	compat.New(agents, gate, validator).WithChat(admitter, turns, conversations).WithKnowledge(datastores, uploads).WithForms(forms).WithContacts(contacts).WithWebhooks(webhooks).Register(mux)

	a.console = console.New(console.Deps{
		Store: a.Store, Members: &member.Service{Store: a.Store}, Accounts: accounts, Agents: agents,
		Datastores: datastores, Turns: turns, Admit: admitter, Limits: a.Limits, Validator: validator, Hooks: a.hooks,
		Webhooks: webhooks,
		Secure:   SecureURL(a.cfg.PublicURL), PublicURL: a.cfg.PublicURL,
	})
	cons := a.console.Handler()
	mux.Handle("GET /{$}", cons)
	mux.Handle("/console", cons)
	mux.Handle("/console/", cons)

	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		compat.WriteError(w, r, noRoute(mux, w, r))
	})
	var h http.Handler = requestLog(recoverPanics(withCORS(a.cfg.CORSOrigins, unknownRPC(mux, notePattern(mux), readLimit(wire.MaxMessageBytes)))))
	if telemetry.Enabled() {
		h = traceREST(h)
	}
	return clientAddr(a.cfg.TrustedProxies, h), nil
}

// traceREST gives REST and console requests a server span named by their
// route pattern (otelhttp); RPCs get theirs from otelconnect, and health
// checks none. A remote parent is linked, not joined, as for RPCs.
func traceREST(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "parley",
		otelhttp.WithFilter(func(r *http.Request) bool {
			p := r.URL.Path
			return !strings.HasPrefix(p, "/parley.") && !strings.HasPrefix(p, "/grpc.") && p != "/healthz" && p != "/readyz"
		}),
		otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method
		}),
	)
}

// readyz answers 200 when Postgres answers and every migration is applied.
func (a *App) readyz(w http.ResponseWriter, r *http.Request) {
	problem := a.notReady(r.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if problem != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(problem + "\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// notReady is why the instance cannot serve (the database out of reach,
// migrations pending), or "" when it can: what /readyz and the gRPC health
// service answer.
func (a *App) notReady(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.Pool.Ping(ctx); err != nil {
		return "database unreachable"
	}
	if a.migrated.Load() {
		return ""
	}
	// SECURITY: one check at a time: anyone may ask /readyz, and each
	// check opens a Postgres connection outside the pool; a flood of
	// them while migrations are pending would use up the database's
	// connections, every instance's.
	select {
	case a.pendingCheck <- struct{}{}:
		n, err := db.Pending(ctx, a.cfg.DatabaseURL)
		<-a.pendingCheck
		switch {
		case err != nil:
			return "cannot read migration state"
		case n > 0:
			return fmt.Sprintf("%d migrations pending; run parley migrate", n)
		}
		a.migrated.Store(true)
		return ""
	case <-ctx.Done():
		return "cannot read migration state"
	}
}

// readiness answers grpc.health.v1 as /readyz answers: NOT_SERVING while
// the instance is not ready. A static checker said SERVING whatever the
// instance's state, so a gRPC probe (Kubernetes' grpc probe, a client's
// health checking) kept sending calls to an instance whose database was
// out of reach or whose migrations were pending.
type readiness struct {
	app      *App
	services *grpchealth.StaticChecker // the services answered for (unknown ones: not_found)
}

func (c readiness) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	resp, err := c.services.Check(ctx, req)
	if err != nil {
		return nil, err
	}
	if c.app.notReady(ctx) != "" {
		resp.Status = grpchealth.StatusNotServing
	}
	return resp, nil
}

// Handler is the whole HTTP surface.
func (a *App) Handler() http.Handler { return a.handler }

// MetricsHandler serves the Prometheus metrics: the process's, and this
// instance's database pool and job queue, read at scrape time. It belongs on
// a listener of its own (ServeMetrics), never on the API's.
func (a *App) MetricsHandler() (http.Handler, error) {
	running, _ := a.cfg.TurnLimits()
	return metrics.Handler(metrics.NewPoolCollector(a.Pool), metrics.NewQueueCollector(jobs.QueueCounter(a.jobsPool)),
		metrics.NewTurnCollector(a.turnQueue.Running, a.turnQueue.Waiting, running))
}

// ServeMetrics serves GET /metrics on ln until ctx ends.
func (a *App) ServeMetrics(ctx context.Context, ln net.Listener) error {
	h, err := a.MetricsHandler()
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	// Go's profiler (CPU, heap, goroutines: go tool pprof
	// http://<metrics-addr>/debug/pprof/profile?seconds=20) on the metrics
	// listener only, which is never the public port: profiling under load
	// (make load, issue 13) needs it. Profiles stay under WriteTimeout.
	// SECURITY: not /debug/pprof/cmdline: the command line may carry a
	// --database-url with its password, a --secrets-key or a search key,
	// and whoever reaches this port (a scraper's network) would read them.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	slog.Info("serving metrics", "addr", ln.Addr().String())
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err = srv.Shutdown(sctx)
		<-errc
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// migrationPoll is how often an instance started with --migrate=false
// (its jobs waiting for `parley migrate`) asks whether the migrations are
// applied.
var migrationPoll = 5 * time.Second

// awaitMigrations returns true once every migration is applied, at once for
// an instance that applied them (--migrate) or runs no jobs; false if ctx
// ends first. Started on a database with migrations pending (it waits for
// `parley migrate`; a server is not ready meanwhile), an instance's jobs
// failed to start on River's missing tables, and it then ran none until
// restarted (a server, once ready, too); or it ran this release's jobs on
// the older schema, each failing (a column not there yet).
func (a *App) awaitMigrations(ctx context.Context) bool {
	if a.cfg.Migrate || a.cfg.Workers == 0 {
		return true
	}
	for logged := false; ; logged = true {
		if a.migrated.Load() {
			return true
		}
		n, err := db.Pending(ctx, a.cfg.DatabaseURL)
		if err == nil && n == 0 {
			a.migrated.Store(true)
			return true
		}
		if !logged {
			slog.Warn("jobs wait for the migrations to be applied (parley migrate)", "pending", n, "err", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(migrationPoll):
		}
	}
}

// Serve serves on ln until ctx ends, then stops taking requests and jobs and
// waits up to the shutdown timeout for those in flight, requests and jobs
// alike (see RunWorkers).
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	srv := NewHTTPServer(a.handler)
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	worked := make(chan error, 1)
	go func() { worked <- a.RunWorkers(workCtx) }()
	flushCtx, stopFlush := context.WithCancel(context.WithoutCancel(ctx))
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		a.Auth.RunLastUsedFlusher(flushCtx, a.cfg.LastUsedFlush)
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	slog.Info("serving", "addr", ln.Addr().String())
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		slog.Info("shutting down", "grace", a.cfg.ShutdownTimeout)
		a.startStopping()
		// Jobs drain beside the requests, within the same grace: the
		// workers take no new job from now on.
		stopWork()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
		// Streams still open near the deadline are ended with a final event
		// (their partial answers stored) so that they close before it.
		drainTimer := time.AfterFunc(drainAt(a.cfg.ShutdownTimeout), a.startDrain)
		err = srv.Shutdown(sctx)
		drainTimer.Stop()
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			// Said as what happened: a bare "context deadline exceeded"
			// was all an operator read.
			err = fmt.Errorf("requests still running after --shutdown-timeout %s were cut", a.cfg.ShutdownTimeout)
		}
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
	}
	stopFlush()
	<-flushed
	stopWork()
	if werr := <-worked; werr != nil {
		slog.Error("stopping workers", "err", werr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// NewHTTPServer returns the server Parley runs handler with: HTTP/1.1 and
// cleartext HTTP/2 with explicit timeouts. There is no write timeout, since
// streams (gRPC, SSE) outlive any fixed one.
func NewHTTPServer(handler http.Handler) *http.Server {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		Protocols:         new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}

// closeWait bounds Close's wait for the pools' connections to close.
const closeWait = 3 * time.Second

// Close stops the conversations' listener and the console's session
// cleanup, and releases the pools and Redis client. It waits at most
// closeWait for the listener's connection and the pools: closing a
// connection to a database that stopped answering takes pgx 15 s (its
// bound), which held a process that shut down past its shutdown timeout;
// the connections are then left to the process's exit.
func (a *App) Close() {
	a.startStopping()
	a.startDrain()
	closed := make(chan struct{})
	if a.console != nil {
		a.console.Close()
	}
	go func() {
		defer close(closed)
		if a.hub != nil {
			a.hub.Close()
		}
		if a.Pool != nil {
			a.Pool.Close()
		}
		if a.jobsPool != nil {
			a.jobsPool.Close()
		}
	}()
	wait := time.NewTimer(closeWait)
	defer wait.Stop()
	select {
	case <-closed:
	case <-wait.C:
		slog.Warn("database connections still closing; left to the process's exit", "waited", closeWait)
	}
	if a.redis != nil {
		_ = a.redis.Close()
	}
}

// TurnQueue is the admission queue of this instance's chat turns.
func (a *App) TurnQueue() *chat.TurnQueue { return a.turnQueue }
