package server

import (
	"context"
	"flag"
	"io"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/knowledge"
)

// The web search backends are read from their variables, and a flag wins
// over its variable.
func TestWebSearchConfig(t *testing.T) {
	t.Setenv("PARLEY_SEARXNG_URL", "http://searx.internal:8080")
	t.Setenv("PARLEY_BRAVE_API_KEY", "brave-key")
	t.Setenv("PARLEY_TAVILY_BASE_URL", "http://tavily.test")
	var c Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	require.NoError(t, fs.Parse([]string{"--tavily-api-key", "tvly-key"}))
	require.NoError(t, c.Err())
	require.Equal(t, "http://searx.internal:8080", c.WebSearch.SearxngURL)
	require.Equal(t, "brave-key", c.WebSearch.BraveAPIKey)
	require.Empty(t, c.WebSearch.BraveBaseURL)
	require.Equal(t, "tvly-key", c.WebSearch.TavilyAPIKey)
	require.Equal(t, "http://tavily.test", c.WebSearch.TavilyBaseURL)

	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	c = Config{}
	c.Flags(fs)
	require.NoError(t, fs.Parse([]string{"--searxng-url", "http://other:8888"}))
	require.Equal(t, "http://other:8888", c.WebSearch.SearxngURL)
}

// The exact-search bounds default to the knowledge package's, are read from
// the variable or the flag, and a negative one is refused.
func TestSearchExactConfig(t *testing.T) {
	var c Config
	c.Flags(flag.NewFlagSet("serve", flag.ContinueOnError))
	require.Equal(t, knowledge.DefaultExactBelow, c.SearchExactBelow)
	require.Equal(t, knowledge.DefaultExactMax, c.SearchExactMax)

	t.Setenv("PARLEY_SEARCH_EXACT_MAX", "0")
	c = Config{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	require.NoError(t, fs.Parse([]string{"--search-exact-below", "500"}))
	require.Equal(t, 500, c.SearchExactBelow)
	require.Equal(t, 0, c.SearchExactMax)
	require.NoError(t, c.Err())

	c.SearchExactBelow = -1
	require.ErrorContains(t, c.Err(), "--search-exact-below -1")
}

// Webhook deliveries are kept 30 days unless configured; 0 keeps them for
// ever, a negative retention is refused.
func TestWebhookRetentionConfig(t *testing.T) {
	var c Config
	c.Flags(flag.NewFlagSet("serve", flag.ContinueOnError))
	require.Equal(t, 30*24*time.Hour, c.WebhookRetention)

	t.Setenv("PARLEY_WEBHOOK_RETENTION", "0")
	c = Config{}
	c.Flags(flag.NewFlagSet("serve", flag.ContinueOnError))
	require.Zero(t, c.WebhookRetention)
	require.NoError(t, c.Err())

	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	require.NoError(t, fs.Parse([]string{"--webhook-retention", "-1h"}))
	require.ErrorContains(t, c.Err(), "--webhook-retention -1h0m0s")
}

// Metrics are off unless an address is given, read from the flag or the
// variable; an address sharing the API's port is refused.
func TestMetricsAddrConfig(t *testing.T) {
	var c Config
	c.Flags(flag.NewFlagSet("serve", flag.ContinueOnError))
	require.Empty(t, c.MetricsAddr, "metrics are off by default")

	t.Setenv("PARLEY_METRICS_ADDR", "127.0.0.1:9090")
	c = Config{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	require.NoError(t, fs.Parse(nil))
	require.Equal(t, "127.0.0.1:9090", c.MetricsAddr)
	require.NoError(t, c.Err())

	for _, tc := range []struct {
		api, metrics string
		clash        bool
	}{
		{":8080", ":8080", true},
		{":8080", "127.0.0.1:8080", true},
		{"127.0.0.1:8080", "0.0.0.0:8080", true},
		{"10.0.0.1:8080", "127.0.0.1:8080", false},
		{":8080", ":9090", false},
		{":0", ":0", false},
	} {
		c := Config{Addr: tc.api, MetricsAddr: tc.metrics}
		if err := c.Err(); tc.clash {
			require.ErrorContains(t, err, "--metrics-addr", "%+v", tc)
		} else {
			require.NoError(t, err, "%+v", tc)
		}
	}
}

// --workers is a count (0: an API-only instance) and still takes the true
// and false it took as a bool flag; the flag wins over PARLEY_WORKERS.
func TestWorkersFlag(t *testing.T) {
	parse := parseServe
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, DefaultWorkers},
		{[]string{"--workers", "0"}, 0},
		{[]string{"--workers=0"}, 0},
		{[]string{"--workers", "12"}, 12},
		{[]string{"--workers", "2500"}, 2500},
		{[]string{"--workers=false"}, 0},
		{[]string{"--workers=true"}, DefaultWorkers},
		{[]string{"--workers", "false"}, 0},
	} {
		c, err := parse(tc.args...)
		require.NoError(t, err, "%v", tc.args)
		require.Equal(t, tc.want, c.Workers, "%v", tc.args)
	}
	// A count does not end the flags (as it would after a bool flag).
	c, err := parse("--workers", "0", "--addr", ":9999")
	require.NoError(t, err)
	require.Equal(t, 0, c.Workers)
	require.Equal(t, ":9999", c.Addr)

	for _, bad := range []string{"-1", "2501", "many", ""} {
		_, err := parse("--workers=" + bad)
		require.Error(t, err, "--workers=%q", bad)
		require.Contains(t, err.Error(), "workers")
	}

	t.Setenv("PARLEY_WORKERS", "0")
	c, err = parse()
	require.NoError(t, err)
	require.Equal(t, 0, c.Workers)
	c, err = parse("--workers", "2")
	require.NoError(t, err)
	require.Equal(t, 2, c.Workers, "the flag wins over its variable")
	t.Setenv("PARLEY_WORKERS", "false")
	c, err = parse()
	require.NoError(t, err)
	require.Equal(t, 0, c.Workers)
	t.Setenv("PARLEY_WORKERS", "lots")
	_, err = parse()
	require.ErrorContains(t, err, `PARLEY_WORKERS: "lots" is not a number of workers`)
}

// A turn's deadline defaults under a proxy's usual 60 s idle timeout; its
// variable sets it and a bad value is reported.
func TestTurnTimeoutConfig(t *testing.T) {
	var c Config
	c.Flags(flag.NewFlagSet("serve", flag.ContinueOnError))
	require.Equal(t, 45*time.Second, c.TurnTimeout)

	t.Setenv("PARLEY_TURN_TIMEOUT", "20s")
	c = Config{}
	c.Flags(flag.NewFlagSet("serve", flag.ContinueOnError))
	require.NoError(t, c.Err())
	require.Equal(t, 20*time.Second, c.TurnTimeout)

	t.Setenv("PARLEY_TURN_TIMEOUT", "soon")
	c = Config{}
	c.Flags(flag.NewFlagSet("serve", flag.ContinueOnError))
	require.ErrorContains(t, c.Err(), "PARLEY_TURN_TIMEOUT")
}

// The turn admission limits: 256 turns per database connection and as many
// waiting by default, the flags' (or variables') counts otherwise; negative
// counts, and an organization's share past 100 percent, are refused at start.
func TestTurnLimitsConfig(t *testing.T) {
	var c Config
	c.Flags(flag.NewFlagSet("serve", flag.ContinueOnError))
	running, waiting := c.TurnLimits()
	require.Equal(t, 16*256, running)
	require.Equal(t, running, waiting)

	c.DBMaxConns = 4
	running, waiting = c.TurnLimits()
	require.Equal(t, []int{1024, 1024}, []int{running, waiting})
	// A pool too large to count turns by stays within pgx's bound: the
	// limits overflowed to one turn at a time and none waiting.
	c.DBMaxConns = math.MaxInt
	running, waiting = c.TurnLimits()
	require.Equal(t, []int{math.MaxInt32 * 256, math.MaxInt32 * 256}, []int{running, waiting})
	require.Equal(t, math.MaxInt32*2, c.LoadLimit())
	c.DBMaxConns, c.DatabaseURL = 0, "postgres://u@h/d?pool_max_conns=2" // the URL's own size
	running, _ = c.TurnLimits()
	require.Equal(t, 512, running)
	require.Equal(t, 4, c.LoadLimit())

	t.Setenv("PARLEY_MAX_TURNS", "50")
	c = Config{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	require.NoError(t, fs.Parse([]string{"--turn-queue", "7"}))
	running, waiting = c.TurnLimits()
	require.Equal(t, []int{50, 7}, []int{running, waiting})

	c.MaxTurns = -1
	_, err := New(context.Background(), c)
	require.ErrorContains(t, err, "--max-turns")

	// One organization's share: half by default (also when unset, as in
	// tests), the flag's percentage otherwise, 1 to 100.
	require.Equal(t, 50, c.OrgShare())
	require.Equal(t, 50, (&Config{}).OrgShare())
	t.Setenv("PARLEY_ORG_TURN_SHARE", "30")
	c = Config{}
	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	require.Equal(t, 30, c.OrgShare())
	require.NoError(t, fs.Parse([]string{"--org-turn-share", "100"}))
	require.Equal(t, 100, c.OrgShare())
	c.OrgTurnShare = 101
	_, err = New(context.Background(), c)
	require.ErrorContains(t, err, "--org-turn-share")
}

// The usage (--help, a mistyped flag) prints each flag's default, read from
// the environment: URLs are printed without their passwords, keys not at
// all, while the values themselves are kept whole.
func TestSecretFlagsAreRedactedInUsage(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://parley:pw@db:5432/parley?sslmode=disable": "postgres://parley:xxxxx@db:5432/parley?sslmode=disable",
		"postgres://db/parley?password=pw&user=parley":        "postgres://db/parley?password=xxxxx&user=parley",
		"redis://:pw@redis:6379/0":                            "redis://:xxxxx@redis:6379/0",
		"host=db user=parley password=pw dbname=parley":       "host=db user=parley password=xxxxx dbname=parley",
		"host=db password='p w' dbname=parley":                "host=db password=xxxxx dbname=parley",
		"postgres://parley@db/parley":                         "postgres://parley@db/parley",
		// url.Parse refuses it (an unescaped #): redacted all the same.
		"postgres://parley:p#w@db/parley": "postgres://parley:xxxxx@db/parley",
	} {
		require.Equal(t, want, RedactURL(in), in)
	}

	t.Setenv("PARLEY_DATABASE_URL", "postgres://parley:db-pw@db/parley")
	t.Setenv("PARLEY_SECRETS_KEY", "the-secrets-key")
	// A SearXNG behind basic auth: Go's client sends the URL's userinfo.
	t.Setenv("PARLEY_SEARXNG_URL", "https://parley:searx-pw@searx.internal")
	t.Setenv("PARLEY_BRAVE_BASE_URL", "https://parley:brave-pw@brave.internal")
	t.Setenv("PARLEY_TAVILY_BASE_URL", "https://parley:tavily-pw@tavily.internal")
	var c Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var usage strings.Builder
	fs.SetOutput(&usage)
	c.Flags(fs)
	require.Error(t, fs.Parse([]string{"--nope"}))
	require.NotContains(t, usage.String(), "db-pw")
	require.NotContains(t, usage.String(), "the-secrets-key")
	require.NotContains(t, usage.String(), "searx-pw")
	require.NotContains(t, usage.String(), "brave-pw")
	require.NotContains(t, usage.String(), "tavily-pw")
	require.Contains(t, usage.String(), "postgres://parley:xxxxx@db/parley")
	require.Contains(t, usage.String(), "https://parley:xxxxx@searx.internal")
	require.Equal(t, "postgres://parley:db-pw@db/parley", c.DatabaseURL)
	require.Equal(t, "https://parley:searx-pw@searx.internal", c.WebSearch.SearxngURL)
	require.Equal(t, "the-secrets-key", c.SecretsKey)

	require.NoError(t, fs.Parse([]string{"--secrets-key", "other", "--database-url", "postgres://x"}))
	require.Equal(t, "other", c.SecretsKey)
	require.Equal(t, "postgres://x", c.DatabaseURL)
}

// The usage names each flag's value by its kind: the flag package takes a
// back-quoted word of a usage as the value's name, and printed
// "-secrets-key-previous parley admin reseal", as if that were its value.
func TestFlagUsagesNameNoValue(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		require.NotContains(t, f.Usage, "`", "--%s's usage", f.Name)
	})
}

// The last-use flush interval is positive (a ticker's), whether from the
// flag or the variable; negative timeouts and counts, and a public URL that
// cannot begin a link, are refused naming their flag.
func TestUnworkableSettingsConfig(t *testing.T) {
	parse := parseServe
	c, err := parse()
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, c.LastUsedFlush)
	c, err = parse("--last-used-flush", "2m")
	require.NoError(t, err)
	require.Equal(t, 2*time.Minute, c.LastUsedFlush)
	for _, args := range [][]string{
		{"--last-used-flush", "0"}, {"--last-used-flush", "-1s"}, {"--last-used-flush", "soon"},
		{"--shutdown-timeout", "-1s"}, {"--db-max-conns", "-1"}, {"--search-ef", "-5"},
		{"--public-url", "example.com"}, {"--public-url", "ftp://example.com"}, {"--public-url", "https://"},
	} {
		_, err := parse(args...)
		require.ErrorContains(t, err, strings.TrimPrefix(args[0], "-"), "%v", args)
	}
	_, err = parse("--shutdown-timeout", "0")
	require.NoError(t, err, "0: no wait")

	t.Setenv("PARLEY_LAST_USED_FLUSH", "0")
	_, err = parse()
	require.ErrorContains(t, err, "PARLEY_LAST_USED_FLUSH")

	// The cookie is Secure behind https, however its scheme is written.
	require.True(t, SecureURL("HTTPS://console.example.com"))
	require.True(t, SecureURL("https://console.example.com"))
	require.False(t, SecureURL("http://localhost:8080"))
}

// parseServe parses serve's flags from args (and the environment), then
// checks them as serve does.
func parseServe(args ...string) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Flags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	return c, c.Err()
}

// Settings that were checked only where they are used are refused by Err,
// naming their flag: before New migrates the database (a mistyped Redis
// URL, secrets key or embedder stopped the start only once the migrations
// were applied; an embedder without its key, too), or at all (a web search URL that is no URL made every
// web_search call fail, the server started).
func TestSettingsRefusedBeforeTheDatabase(t *testing.T) {
	// A provider's embedder without its key is refused here too.
	t.Setenv("PARLEY_OPENAI_API_KEY", "")
	t.Setenv("PARLEY_GEMINI_API_KEY", "")
	for _, args := range [][]string{
		{"--redis-url", "http://127.0.0.1:6379"}, {"--redis-url", "redis://127.0.0.1:6379/not-a-db"},
		{"--secrets-key", "abc"}, {"--embeddings", "use_lite"}, {"--embeddings", "openai"}, {"--embeddings", "gemini"},
		{"--searxng-url", "searx.internal:8080"}, {"--brave-base-url", "ftp://brave.test"},
		{"--tavily-base-url", "not a url"}, {"--tavily-base-url", "https://"},
		{"--addr", "8080"}, {"--metrics-addr", "localhost"},
	} {
		_, err := parseServe(args...)
		require.ErrorContains(t, err, args[0], "%v", args)
	}
	// SECURITY: the error goes to the log at start, without the password.
	_, err := parseServe("--redis-url", "redis://:s3cr%zzet@127.0.0.1:6379/0")
	require.ErrorContains(t, err, "--redis-url redis://:xxxxx@127.0.0.1:6379/0")
	require.NotContains(t, err.Error(), "s3cr")
	_, err = parseServe("--searxng-url", "searx://u:s3cr@%zz")
	require.ErrorContains(t, err, "--searxng-url")
	require.NotContains(t, err.Error(), "s3cr")

	_, err = parseServe("--redis-url", "redis://127.0.0.1:6379/0", "--embeddings", "lexical",
		"--secrets-key", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "--searxng-url", "http://searx.internal:8080/",
		"--brave-base-url", "https://brave.test/api", "--addr", "127.0.0.1:0", "--metrics-addr", ":9090")
	require.NoError(t, err)

	t.Setenv("PARLEY_OPENAI_API_KEY", "sk-test")
	_, err = parseServe("--embeddings", "openai")
	require.NoError(t, err)
}

// The address ranges (--trusted-proxy, --fetch-allow,
// --attachment-fetch-allow) are read from their variables, and flags
// replace the variable's list, as --cors-origin's do: they were added to
// it, so that --trusted-proxy 10.0.0.0/8 over PARLEY_TRUSTED_PROXIES=
// 0.0.0.0/0 still took every peer's X-Forwarded-For for the client.
func TestAddressRangeFlagsReplaceTheirVariables(t *testing.T) {
	t.Setenv("PARLEY_TRUSTED_PROXIES", "0.0.0.0/0, ::/0")
	t.Setenv("PARLEY_FETCH_ALLOW", "10.0.0.0/8")
	t.Setenv("PARLEY_ATTACHMENT_FETCH_ALLOW", "192.168.0.0/16")
	c, err := parseServe()
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}, c.TrustedProxies)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, c.FetchAllow)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}, c.AttachmentFetchAllow)

	c, err = parseServe("--trusted-proxy", "10.1.0.0/16", "--trusted-proxy", "10.2.0.0/16",
		"--fetch-allow", "172.16.0.0/12", "--attachment-fetch-allow", "10.9.0.0/16")
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.2.0.0/16")}, c.TrustedProxies)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")}, c.FetchAllow)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, c.AttachmentFetchAllow)
}

// --secrets-key-previous (PARLEY_SECRETS_KEY_PREVIOUS) is a list of keys
// in --secrets-key's form: a bad one stops the start naming the flag and
// its place in the list, never a key; one equal to the current key is
// harmless; the list needs a current key. The values are printed by no
// usage.
func TestSecretsKeyPreviousConfig(t *testing.T) {
	const current, old = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
	c, err := parseServe("--secrets-key", current, "--secrets-key-previous", old+", "+current)
	require.NoError(t, err)
	s, err := c.Sealer()
	require.NoError(t, err)
	require.NotNil(t, s)

	_, err = parseServe("--secrets-key", current, "--secrets-key-previous", old+",bm90LWEta2V5LXMzY3IzdA==")
	require.ErrorContains(t, err, "--secrets-key-previous: key 2 of the list")
	require.NotContains(t, err.Error(), "bm90LWEta2V5LXMzY3IzdA")
	_, err = parseServe("--secrets-key-previous", old)
	require.ErrorContains(t, err, "--secrets-key-previous is set without --secrets-key")

	t.Setenv("PARLEY_SECRETS_KEY", current)
	t.Setenv("PARLEY_SECRETS_KEY_PREVIOUS", "not-a-key-s3cr3t")
	_, err = parseServe()
	require.ErrorContains(t, err, "--secrets-key-previous: key 1 of the list")
	require.NotContains(t, err.Error(), "s3cr3t")
	var usage strings.Builder
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(&usage)
	c.Flags(fs)
	require.Error(t, fs.Parse([]string{"--nope"}))
	require.Contains(t, usage.String(), "-secrets-key-previous")
	require.NotContains(t, usage.String(), "s3cr3t")
}
