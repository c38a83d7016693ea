package server

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/parleyhq/parley/backend/chat"
	"github.com/parleyhq/parley/backend/conversation"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/origin"
	"github.com/parleyhq/parley/backend/seal"
	"github.com/parleyhq/parley/backend/tool"
	"github.com/parleyhq/parley/backend/webhook"
)

// DefaultDatabaseURL is what scripts/db-setup.sh makes ready.
const DefaultDatabaseURL = "postgres://parley:parley@127.0.0.1:5432/parley?sslmode=disable"

// DefaultTurnTimeout is well under the 60 s idle timeout common to reverse
// proxies and load balancers: a JSON turn sends nothing before its answer, so
// it must end (answer or error) before a proxy gives up on it.
const DefaultTurnTimeout = 45 * time.Second

// Config is every setting of `parley serve`. Each has a flag and a PARLEY_*
// environment variable (DATABASE_URL is also read); a flag wins over its
// variable.
type Config struct {
	Addr string
	// MetricsAddr is where Prometheus metrics are served (GET /metrics),
	// on a listener of their own; empty: not served. Never the API's port.
	MetricsAddr string
	DatabaseURL string
	// PublicURL is where people reach the console (sign-in links; an https
	// URL makes the session cookie Secure).
	PublicURL string
	// DBMaxConns bounds the Postgres pool; 0: db.PoolSize decides (the
	// URL's pool_max_conns, else db.DefaultMaxConns).
	DBMaxConns int
	// DBTracer sees every statement of the pool (not a flag: tests count
	// statements with it).
	DBTracer pgx.QueryTracer
	// WatchHeartbeat is how often a quiet conversation stream sends a
	// heartbeat and checks its caller may still follow it; 0:
	// conversation.HeartbeatEvery (not a flag: tests shorten it).
	WatchHeartbeat  time.Duration
	RedisURL        string
	RedisPrefix     string
	Migrate         bool
	ShutdownTimeout time.Duration
	// TurnTimeout bounds a chat turn's model and tool work; 0: no bound.
	TurnTimeout time.Duration
	// MaxTurns is how many chat turns run at once, TurnQueue how many more
	// may wait for one of them (503 OVERLOADED past that); 0: derived from
	// the pool's size (TurnLimits).
	MaxTurns  int
	TurnQueue int
	// OrgTurnShare is the percentage of those slots and waiting places
	// together that one organization's turns may hold (chat.TurnQueue.
	// ShareByOrg); 0: chat.DefaultOrgShare, 100: no bound.
	OrgTurnShare int
	// OrgStreams bounds the conversation event streams one organization's
	// keys hold open on this instance (conversation.Service.OrgStreams); 0:
	// no bound.
	OrgStreams int
	// UploadBudget is how many bytes of datasources' uploads this instance
	// reads at once, UploadWait how long one waits for room (then 503
	// OVERLOADED); 0: knowledge.UploadBudgetBytes, knowledge.UploadWait.
	// No flags: set by tests and embedders.
	UploadBudget  int64
	UploadWait    time.Duration
	LogLevel      string
	LastUsedFlush time.Duration
	ModelsFile    string
	// Workers is how many ingestion jobs this process runs at once (River's
	// MaxWorkers); 0 runs none: the instance only enqueues them, for
	// `parley worker` processes elsewhere to run.
	Workers int
	// WebhookRetention is how long webhook deliveries are kept; 0 keeps
	// them for ever.
	WebhookRetention time.Duration
	// Embeddings makes the embedders: its Default (--embeddings) names the
	// one of new datastores; the provider ones are enabled by the same
	// PARLEY_OPENAI_API_KEY / PARLEY_GEMINI_API_KEY (and _BASE_URL) as the
	// model providers.
	Embeddings embed.Config
	// SearchEf is the HNSW search breadth (hnsw.ef_search).
	SearchEf int
	// SearchExactBelow and SearchExactMax bound the search scopes ranked
	// exactly instead of through the HNSW index (knowledge.Knowledge's
	// ExactBelow and ExactMax).
	SearchExactBelow, SearchExactMax int
	// FetchAllow opens private address ranges to the web fetcher
	// (intranet documents), to agents' http_request endpoints and to
	// webhook endpoints; none by default.
	FetchAllow []netip.Prefix
	// AttachmentFetchAllow opens private address ranges to chat
	// attachments, fetched from URLs any caller gives (a public agent's
	// visitors need no key); none by default, whatever FetchAllow opens.
	AttachmentFetchAllow []netip.Prefix
	// SecretsKey is the base64 of 32 random bytes that seals stored secrets
	// (webhooks' signing secrets, http_request's header values, see
	// backend/seal); without it neither can be stored.
	SecretsKey string
	// SecretsKeyPrevious are earlier secrets keys, comma-separated, in the
	// same form: what they sealed still opens (a key being rotated, until
	// `parley admin reseal` has sealed everything under SecretsKey).
	SecretsKeyPrevious string
	// CORSOrigins are the browser origins allowed to call the API (CORS);
	// none by default, so no CORS headers are sent.
	CORSOrigins []string
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the
	// client (public agents' per-IP limits, logs); none by default, so the
	// header is ignored and the peer is the client.
	TrustedProxies []netip.Prefix
	// WebSearch is web_search's backend: the first configured of SearXNG,
	// Brave Search and Tavily; none leaves web_search unoffered.
	WebSearch tool.SearchConfig
	// Catalog, when set, replaces the catalog built from the environment
	// and ModelsFile (tests point model names at fake providers with it).
	Catalog *llm.Catalog
	// Embedder, when set, is the default embedder of new datastores in
	// place of the one Embeddings names (tests use cheap ones with it).
	Embedder embed.Embedder
	// StreamWriteTimeout, when set, replaces the 10 s a streaming RPC's
	// write may wait for its client (tests shorten it).
	StreamWriteTimeout time.Duration

	envErrs []error
}

// EnvErr reports the environment variables that could not be read, alone:
// what an admin command, which uses only the database of the settings,
// must not take for their defaults (PARLEY_MIGRATE=no is not true). The
// rest of Err (a serving setting that cannot work, an embedder without its
// key) is serve's and worker's to refuse.
func (c *Config) EnvErr() error { return errors.Join(c.envErrs...) }

// Err reports environment variables that could not be read, and settings
// that contradict each other.
func (c *Config) Err() error {
	errs := c.envErrs
	if c.MetricsAddr != "" && samePort(c.MetricsAddr, c.Addr) {
		errs = append(errs, fmt.Errorf("--metrics-addr %q is the API's address: metrics are served on a listener of their own, never on the public port", c.MetricsAddr))
	}
	if c.SearchExactBelow < 0 || c.SearchExactMax < 0 {
		errs = append(errs, fmt.Errorf("--search-exact-below %d and --search-exact-max %d: chunk counts, 0 or more", c.SearchExactBelow, c.SearchExactMax))
	}
	if c.WebhookRetention < 0 {
		errs = append(errs, fmt.Errorf("--webhook-retention %s: a duration, 0 (keep for ever) or more", c.WebhookRetention))
	}
	// A negative timeout expired before it began: SIGTERM would cut every
	// request in flight rather than wait for it.
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %s: a duration, 0 (no wait) or more", c.ShutdownTimeout))
	}
	// Negative counts would silently be taken for the defaults.
	if c.DBMaxConns < 0 {
		errs = append(errs, fmt.Errorf("--db-max-conns %d: a count of connections, or 0 for the default", c.DBMaxConns))
	}
	if c.SearchEf < 0 {
		errs = append(errs, fmt.Errorf("--search-ef %d: a search breadth, or 0 for the default", c.SearchEf))
	}
	if c.PublicURL != "" {
		if err := CheckPublicURL(c.PublicURL); err != nil {
			errs = append(errs, err)
		}
	}
	// What is checked only as it is used must be checked here too, before
	// New migrates the database: a mistyped setting stopped the start only
	// after the migrations were applied, or (the web search URLs) not at
	// all, every web_search call failing instead.
	for _, a := range []struct{ flag, addr string }{{"addr", c.Addr}, {"metrics-addr", c.MetricsAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); a.addr != "" && err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: give a listen address, [host]:port", a.flag, a.addr))
		}
	}
	if c.RedisURL != "" {
		if err := checkRedisURL(c.RedisURL); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := c.Sealer(); err != nil {
		errs = append(errs, err)
	}
	if c.Embeddings.Default != "" {
		if err := embed.Check(c.Embeddings); err != nil {
			errs = append(errs, fmt.Errorf("--%w", err))
		}
	}
	for _, u := range []struct{ flag, url string }{
		{"searxng-url", c.WebSearch.SearxngURL}, {"brave-base-url", c.WebSearch.BraveBaseURL}, {"tavily-base-url", c.WebSearch.TavilyBaseURL},
	} {
		if p, err := url.Parse(u.url); u.url != "" && (err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "") {
			errs = append(errs, fmt.Errorf("--%s %q: give the service's base URL, http(s)://host[:port][/path]", u.flag, RedactURL(u.url)))
		}
	}
	return errors.Join(errs...)
}

// Sealer is the sealer of the stored secrets: sealing under --secrets-key
// and opening under it or a key of --secrets-key-previous; nil without a
// secrets key. Its errors name the flag, and which key of the list, never
// a key.
func (c *Config) Sealer() (*seal.Sealer, error) {
	previous, err := seal.ParseKeys(c.SecretsKeyPrevious)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key-previous: %w", err)
	}
	if c.SecretsKey == "" {
		if len(previous) > 0 {
			return nil, errors.New("--secrets-key-previous is set without --secrets-key: the previous keys only open what they sealed beside a current key")
		}
		return nil, nil
	}
	key, err := seal.ParseKey(c.SecretsKey)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key: %w", err)
	}
	return seal.New(key, previous...)
}

// checkRedisURL refuses a --redis-url that go-redis cannot read, naming the
// flag, never its password.
func checkRedisURL(s string) error {
	_, err := redis.ParseURL(s)
	if err == nil {
		return nil
	}
	// SECURITY: url.Parse's error quotes the whole URL, its password too,
	// or the piece it choked on (a "%zz", a port of ":s3cr").
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return fmt.Errorf("--redis-url %s: not a URL (a # or %% in its password must be percent-encoded)", RedactURL(s))
	}
	return fmt.Errorf("--redis-url %s: %w", RedactURL(s), err)
}

// CheckPublicURL refuses a --public-url that cannot begin a link: every
// sign-in and invitation link would be broken.
func CheckPublicURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("--public-url %q: give the console's address, http(s)://host[:port]", RedactURL(s))
	}
	return nil
}

// SecureURL reports whether a public URL is https (the scheme in any case),
// for the session cookie's Secure flag.
func SecureURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https"
}

// samePort reports whether two listen addresses would share a port: the
// same port, and the same host or either one every interface.
func samePort(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return a == b
	}
	everywhere := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return pa == pb && pa != "0" && (ha == hb || everywhere(ha) || everywhere(hb))
}

// Flags registers the settings on fs with their environment defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", env("PARLEY_ADDR", ":8080"), "listen address (PARLEY_ADDR)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", env("PARLEY_METRICS_ADDR", ""),
		"listen address of the Prometheus metrics (GET /metrics), apart from the API, e.g. 127.0.0.1:9090; empty serves none (PARLEY_METRICS_ADDR)")
	fs.StringVar(&c.PublicURL, "public-url", env("PARLEY_PUBLIC_URL", "http://localhost:8080"),
		"the address people open the console at (PARLEY_PUBLIC_URL); https makes the session cookie Secure")
	URLVar(fs, &c.DatabaseURL, "database-url", env("PARLEY_DATABASE_URL", env("DATABASE_URL", DefaultDatabaseURL)),
		"Postgres URL; the database needs the vector extension (PARLEY_DATABASE_URL or DATABASE_URL)")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", c.envInt("PARLEY_DB_MAX_CONNS", 0),
		fmt.Sprintf("largest Postgres pool; 0 takes the database URL's pool_max_conns, else %d (PARLEY_DB_MAX_CONNS)", db.DefaultMaxConns))
	URLVar(fs, &c.RedisURL, "redis-url", env("PARLEY_REDIS_URL", ""),
		"Redis URL for rate-limit counts shared by several instances, e.g. redis://127.0.0.1:6379/0; empty counts in memory (PARLEY_REDIS_URL)")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", env("PARLEY_REDIS_PREFIX", "parley:ratelimit"), "Redis key prefix of rate-limit counters (PARLEY_REDIS_PREFIX)")
	fs.BoolVar(&c.Migrate, "migrate", c.envBool("PARLEY_MIGRATE", true), "apply pending migrations at start (PARLEY_MIGRATE)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.envDuration("PARLEY_SHUTDOWN_TIMEOUT", 30*time.Second),
		"how long SIGTERM waits for requests in flight (PARLEY_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&c.TurnTimeout, "turn-timeout", c.envDuration("PARLEY_TURN_TIMEOUT", DefaultTurnTimeout),
		"the longest a chat turn lasts from its arrival (its wait for a slot, all the model's tries and tool rounds) before it fails with 504 UPSTREAM_TIMEOUT; 0: no bound (PARLEY_TURN_TIMEOUT)")
	fs.IntVar(&c.MaxTurns, "max-turns", c.envInt("PARLEY_MAX_TURNS", 0),
		"chat turns run at once by this instance; 0: 256 per database connection (PARLEY_MAX_TURNS)")
	fs.IntVar(&c.TurnQueue, "turn-queue", c.envInt("PARLEY_TURN_QUEUE", 0),
		"chat turns that may wait for one of those slots (at most --turn-timeout) before more are refused with 503 OVERLOADED; 0: as many as --max-turns (PARLEY_TURN_QUEUE)")
	fs.IntVar(&c.OrgTurnShare, "org-turn-share", c.envInt("PARLEY_ORG_TURN_SHARE", chat.DefaultOrgShare),
		"percent of --max-turns plus --turn-queue that one organization's chat turns may hold, running and waiting; past it its turns are refused with 503 OVERLOADED; 100: no bound, for a deployment serving one organization; 0: the default (PARLEY_ORG_TURN_SHARE)")
	fs.IntVar(&c.OrgStreams, "org-streams", c.envInt("PARLEY_ORG_STREAMS", conversation.DefaultOrgStreams),
		"conversation event streams one organization's API keys may hold open on this instance at once; past it, 429 RATE_LIMIT_EXCEEDED (Connect: resource_exhausted); 0: no bound (PARLEY_ORG_STREAMS)")
	fs.StringVar(&c.LogLevel, "log-level", env("PARLEY_LOG_LEVEL", "info"), "debug, info, warn or error (PARLEY_LOG_LEVEL)")
	fs.StringVar(&c.ModelsFile, "models-file", env("PARLEY_MODELS_FILE", ""),
		"JSON file mapping model names to providers and upstream models, see docs/models.md (PARLEY_MODELS_FILE)")
	c.Workers = c.envWorkers("PARLEY_WORKERS", DefaultWorkers)
	fs.Var(workerCount{&c.Workers}, "workers",
		"how many ingestion jobs this process runs at once (webhook deliveries: 4 times as many); 0 runs none (an API-only instance), true is 4, false is 0 (PARLEY_WORKERS)")
	fs.IntVar(&c.SearchEf, "search-ef", c.envInt("PARLEY_SEARCH_EF", knowledge.DefaultEfSearch),
		"HNSW search breadth: higher finds more of the nearest chunks, slower; see docs/benchmarks.md (PARLEY_SEARCH_EF)")
	fs.IntVar(&c.SearchExactBelow, "search-exact-below", c.envInt("PARLEY_SEARCH_EXACT_BELOW", knowledge.DefaultExactBelow),
		"a search scope of at most this many chunks is always ranked exactly, not through the HNSW index; see docs/knowledge.md (PARLEY_SEARCH_EXACT_BELOW)")
	fs.IntVar(&c.SearchExactMax, "search-exact-max", c.envInt("PARLEY_SEARCH_EXACT_MAX", knowledge.DefaultExactMax),
		"the largest search scope ranked exactly when the HNSW index is large beside it (chunks² ≤ 500 × the index's rows); 0 turns that off; see docs/knowledge.md (PARLEY_SEARCH_EXACT_MAX)")
	fs.StringVar(&c.Embeddings.Default, "embeddings", env("PARLEY_EMBEDDINGS", "use-lite"),
		"embedder of new datastores: use-lite (offline neural model, the default), lexical (offline, hashed words: fast, no synonyms), openai (text-embedding-3-small; needs PARLEY_OPENAI_API_KEY) or gemini (text-embedding-004; needs PARLEY_GEMINI_API_KEY) (PARLEY_EMBEDDINGS)")
	// Keys are read from the environment only (a flag would show them in
	// the process list).
	c.Embeddings.OpenAIKey, c.Embeddings.OpenAIBaseURL = env("PARLEY_OPENAI_API_KEY", ""), env("PARLEY_OPENAI_BASE_URL", "")
	c.Embeddings.GeminiKey, c.Embeddings.GeminiBaseURL = env("PARLEY_GEMINI_API_KEY", ""), env("PARLEY_GEMINI_BASE_URL", "")
	c.prefixes(fs, &c.FetchAllow, "fetch-allow", "PARLEY_FETCH_ALLOW",
		"a private address range (CIDR) the web fetcher, http_request endpoints and webhook endpoints may reach, repeatable; none by default")
	c.prefixes(fs, &c.AttachmentFetchAllow, "attachment-fetch-allow", "PARLEY_ATTACHMENT_FETCH_ALLOW",
		"a private address range (CIDR) chat attachments may be fetched from, repeatable; none by default, as any caller names them (a public agent's visitors too)")
	SecretVar(fs, &c.SecretsKey, "secrets-key", env("PARLEY_SECRETS_KEY", ""),
		"base64 of 32 random bytes (openssl rand -base64 32) sealing the stored webhook signing secrets and http_request header values; neither can be stored without it, and every instance needs the same (PARLEY_SECRETS_KEY)")
	SecretVar(fs, &c.SecretsKeyPrevious, "secrets-key-previous", env("PARLEY_SECRETS_KEY_PREVIOUS", ""),
		"earlier secrets keys, comma-separated, each as --secrets-key: what they sealed still opens, and parley admin reseal seals it again under --secrets-key (PARLEY_SECRETS_KEY_PREVIOUS)")
	c.prefixes(fs, &c.TrustedProxies, "trusted-proxy", "PARLEY_TRUSTED_PROXIES",
		"the address range (CIDR) of a reverse proxy whose X-Forwarded-For gives the client's address, repeatable; none by default")
	c.origins(fs)
	URLVar(fs, &c.WebSearch.SearxngURL, "searxng-url", env("PARLEY_SEARXNG_URL", ""),
		"web_search backend: a SearXNG instance's base URL, its JSON API enabled (PARLEY_SEARXNG_URL); the first configured of SearXNG, Brave, Tavily wins")
	SecretVar(fs, &c.WebSearch.BraveAPIKey, "brave-api-key", env("PARLEY_BRAVE_API_KEY", ""),
		"web_search backend: a Brave Search API subscription token (PARLEY_BRAVE_API_KEY)")
	URLVar(fs, &c.WebSearch.BraveBaseURL, "brave-base-url", env("PARLEY_BRAVE_BASE_URL", ""),
		"the Brave Search API's base URL; empty: https://api.search.brave.com (PARLEY_BRAVE_BASE_URL)")
	SecretVar(fs, &c.WebSearch.TavilyAPIKey, "tavily-api-key", env("PARLEY_TAVILY_API_KEY", ""),
		"web_search backend: a Tavily API key (PARLEY_TAVILY_API_KEY)")
	URLVar(fs, &c.WebSearch.TavilyBaseURL, "tavily-base-url", env("PARLEY_TAVILY_BASE_URL", ""),
		"the Tavily API's base URL; empty: https://api.tavily.com (PARLEY_TAVILY_BASE_URL)")
	// Not 0 nor negative: the flusher's ticker takes neither (it panicked).
	c.LastUsedFlush = c.envDuration("PARLEY_LAST_USED_FLUSH", 30*time.Second)
	if c.LastUsedFlush <= 0 {
		c.envErrs = append(c.envErrs, fmt.Errorf("PARLEY_LAST_USED_FLUSH=%s: give a positive duration", c.LastUsedFlush))
	}
	fs.Var(positiveDuration{&c.LastUsedFlush}, "last-used-flush",
		"how often API key last-use times are written; a positive duration (PARLEY_LAST_USED_FLUSH)")
	fs.DurationVar(&c.WebhookRetention, "webhook-retention", c.envDuration("PARLEY_WEBHOOK_RETENTION", webhook.DefaultRetention),
		"how long webhook deliveries, with the bodies they sent and their attempts, are kept before a periodic job of the workers deletes them; 0 keeps them for ever (PARLEY_WEBHOOK_RETENTION)")
}

// SecretVar binds a string flag holding a secret (a key). Its default
// comes from the environment, and the flag package prints defaults with the
// usage (--help, a mistyped flag): to a terminal, or a container's logs.
// This one's is printed as <redacted> when set.
func SecretVar(fs *flag.FlagSet, p *string, name, value, usage string) {
	*p = value
	fs.Var(secretValue{p, func(string) string { return "<redacted>" }}, name, usage)
}

// URLVar binds a string flag holding a URL that may carry a password (a
// database's, Redis's): the usage prints its default with the password
// redacted (see SecretVar).
func URLVar(fs *flag.FlagSet, p *string, name, value, usage string) {
	*p = value
	fs.Var(secretValue{p, RedactURL}, name, usage)
}

// secretValue is a string flag whose String, what the usage prints, is
// redacted.
type secretValue struct {
	p      *string
	redact func(string) string
}

func (s secretValue) String() string {
	if s.p == nil || *s.p == "" {
		return ""
	}
	return s.redact(*s.p)
}

func (s secretValue) Set(v string) error { *s.p = v; return nil }

// Get implements flag.Getter.
func (s secretValue) Get() any { return *s.p }

// dsnPassword finds a password in a keyword/value connection string
// (host=... password=...), quoted or not.
var dsnPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// RedactURL returns u with any password in it replaced by xxxxx: the
// user's password of a URL, a password query parameter, or a keyword/value
// connection string's password.
func RedactURL(u string) string {
	if p, err := url.Parse(u); err == nil && p.Scheme != "" && p.Opaque == "" {
		if _, ok := p.User.Password(); ok {
			p.User = url.UserPassword(p.User.Username(), "xxxxx")
		}
		if q := p.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			p.RawQuery = q.Encode()
		}
		return p.String()
	}
	// A URL url.Parse refuses (an unescaped # in its password) is still
	// a URL to whoever reads it: its userinfo's password goes too.
	u = urlPassword.ReplaceAllString(u, "${1}xxxxx@")
	return dsnPassword.ReplaceAllString(u, "${1}xxxxx")
}

// urlPassword finds the password of a URL's userinfo (scheme://user:pw@).
var urlPassword = regexp.MustCompile(`(^[A-Za-z][A-Za-z0-9+.-]*://[^:/@]*:)[^@]*@`)

// turnsPerConn is how many chat turns run at once per database connection
// unless --max-turns says otherwise. A turn holds a connection for a few
// round trips (about a millisecond here) in a life of seconds spent on the
// model, so a pool serves many: at 256 per connection, the default pool's
// 4,096 turns all starting together wait about 4096 × 1 ms / 16 ≈ 0.25 s for
// their first transaction, and the 2,000 to 5,000 concurrent streams issue 13
// asks for run without queueing.
const turnsPerConn = 256

// loadsPerConn is how many turns are in their load phase at once per
// database connection (chat.TurnQueue.LimitLoads): enough to keep every
// connection busy, few enough that an answer to store never waits behind
// thousands of them.
const loadsPerConn = 2

// LoadLimit is how many chat turns run their load phase at once.
func (c *Config) LoadLimit() int {
	return db.PoolSize(c.DatabaseURL, c.DBMaxConns) * loadsPerConn
}

// TurnLimits is how many chat turns run at once and how many more may wait:
// MaxTurns and TurnQueue, or, when 0, derived from the database pool's
// size (turnsPerConn; the wait list as long as the running turns).
func (c *Config) TurnLimits() (running, waiting int) {
	running, waiting = c.MaxTurns, c.TurnQueue
	if running <= 0 {
		running = db.PoolSize(c.DatabaseURL, c.DBMaxConns) * turnsPerConn
	}
	if waiting <= 0 {
		waiting = running
	}
	return running, waiting
}

// OrgShare is the percentage of the turn queue one organization may hold
// (OrgTurnShare, chat.DefaultOrgShare when 0).
func (c *Config) OrgShare() int {
	if c.OrgTurnShare == 0 {
		return chat.DefaultOrgShare
	}
	return c.OrgTurnShare
}

// DefaultWorkers is how many ingestion jobs a process runs at once unless
// told otherwise (and what --workers=true means).
const DefaultWorkers = 4

// maxWorkers keeps every queue within River's bound of 10,000 workers:
// webhook deliveries get 4 times the count (backend/jobs).
const maxWorkers = 2_500

// workerCount is --workers: a count, or (as when it was a bool flag) true
// for the default count and false for none. It is not a bool flag: a bare
// --workers would swallow the count that follows it (--workers 0).
type workerCount struct{ n *int }

func (w workerCount) String() string {
	if w.n == nil {
		return ""
	}
	return strconv.Itoa(*w.n)
}

func (w workerCount) Set(v string) error {
	n, err := parseWorkers(v)
	if err != nil {
		return err
	}
	*w.n = n
	return nil
}

func parseWorkers(v string) (int, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 || n > maxWorkers {
			return 0, fmt.Errorf("%d workers: use 0 (none) to %d", n, maxWorkers)
		}
		return n, nil
	}
	if b, err := strconv.ParseBool(v); err == nil {
		if b {
			return DefaultWorkers, nil
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%q is not a number of workers (0 for none; true or false also work)", v)
}

func (c *Config) envWorkers(name string, def int) int {
	v := env(name, "")
	if v == "" {
		return def
	}
	n, err := parseWorkers(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s: %w", name, err))
		return def
	}
	return n
}

// positiveDuration is a duration flag refusing 0 and negative durations.
type positiveDuration struct{ d *time.Duration }

func (p positiveDuration) String() string {
	if p.d == nil {
		return ""
	}
	return p.d.String()
}

func (p positiveDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("not a duration")
	}
	if d <= 0 {
		return errors.New("give a positive duration")
	}
	*p.d = d
	return nil
}

// prefixes binds a repeatable CIDR flag, and its variable (comma-separated);
// flags replace the variable's list, as a flag wins over its variable
// (--cors-origin too). They were added to it: --trusted-proxy given to
// narrow the proxies of PARLEY_TRUSTED_PROXIES=0.0.0.0/0 still trusted every
// peer's X-Forwarded-For, and --fetch-allow still opened the variable's
// private ranges.
func (c *Config) prefixes(fs *flag.FlagSet, dst *[]netip.Prefix, name, envName, usage string) {
	flagged := false
	fs.Func(name, usage+" ("+envName+", comma-separated; flags replace its list)", func(v string) error {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return err
		}
		if !flagged {
			flagged, *dst = true, nil // the flag wins over the variable
		}
		*dst = append(*dst, p)
		return nil
	})
	for _, v := range strings.Split(env(envName, ""), ",") {
		if v = strings.TrimSpace(v); v != "" {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				c.envErrs = append(c.envErrs, fmt.Errorf("%s: %q is not a CIDR range", envName, v))
				continue
			}
			*dst = append(*dst, p)
		}
	}
}

// origins binds the repeatable --cors-origin flag and PARLEY_CORS_ORIGINS
// (comma-separated); flags replace the variable's list.
func (c *Config) origins(fs *flag.FlagSet) {
	flagged := false
	fs.Func("cors-origin", "a browser origin allowed to call the API (CORS), e.g. https://app.example.com, https://*.example.com or *; repeatable; none by default (PARLEY_CORS_ORIGINS, comma-separated)", func(v string) error {
		if err := origin.Check(v); err != nil {
			return err
		}
		if !flagged {
			flagged, c.CORSOrigins = true, nil // the flag wins over the variable
		}
		c.CORSOrigins = append(c.CORSOrigins, v)
		return nil
	})
	for _, v := range strings.Split(env("PARLEY_CORS_ORIGINS", ""), ",") {
		if v = strings.TrimSpace(v); v != "" {
			if err := origin.Check(v); err != nil {
				c.envErrs = append(c.envErrs, fmt.Errorf("PARLEY_CORS_ORIGINS: %w", err))
				continue
			}
			c.CORSOrigins = append(c.CORSOrigins, v)
		}
	}
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func (c *Config) envInt(name string, def int) int {
	v := env(name, "")
	if v == "" {
		return def
	}
	x, err := strconv.Atoi(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q is not a number", name, v))
		return def
	}
	return x
}

func (c *Config) envBool(name string, def bool) bool {
	v := env(name, "")
	if v == "" {
		return def
	}
	x, err := strconv.ParseBool(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q is not true or false", name, v))
		return def
	}
	return x
}

func (c *Config) envDuration(name string, def time.Duration) time.Duration {
	v := env(name, "")
	if v == "" {
		return def
	}
	x, err := time.ParseDuration(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q is not a duration", name, v))
		return def
	}
	return x
}
