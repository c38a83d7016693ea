package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/ratelimit"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/testenv/syncbuf"
)

// redisProxy stands between an instance and the test Redis. While down it
// accepts connections and closes them at once (a Redis restarting, or gone
// behind its service address); once up it forwards them.
type redisProxy struct {
	URL string
	up  atomic.Bool
}

func newRedisProxy(t *testing.T) *redisProxy {
	t.Helper()
	target, err := url.Parse(dbtest.RedisURL())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &redisProxy{}
	proxied := *target
	proxied.Host = ln.Addr().String()
	p.URL = proxied.String()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.up.Load() {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", target.Host)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			open = append(open, in, out)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
	return p
}

func randomPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "parley-test:" + hex.EncodeToString(b[:])
}

// An instance starts while Redis is down, as a running one carries on
// without it: rate limits hold per instance meanwhile, and are counted in
// Redis again once it answers. A malformed Redis URL is a configuration
// error, still refused at start.
func TestStartsWhileRedisIsDown(t *testing.T) {
	t.Parallel()

	t.Run("nothing listens", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		closed := "redis://" + ln.Addr().String() + "/0"
		require.NoError(t, ln.Close())

		e := testenv.New(t, func(c *server.Config) { c.RedisURL, c.RedisPrefix = closed, randomPrefix() })
		free := e.Bootstrap("Free", "free") // 10 requests a minute
		require.Equal(t, map[int]int{200: 10, 429: 2}, restBurst(t, 12, free.Key, e))
		require.Positive(t, e.App.Limits.Degraded(), "counted in the instance")
	})

	t.Run("connections closed, then Redis is back", func(t *testing.T) {
		t.Parallel()
		proxy := newRedisProxy(t)
		prefix := randomPrefix()
		e := testenv.New(t, func(c *server.Config) { c.RedisURL, c.RedisPrefix = proxy.URL, prefix })
		free := e.Bootstrap("Free", "free")
		require.Equal(t, http.StatusOK, e.Do("GET", "/api/agents", free.Key, nil).Status)
		degraded := e.App.Limits.Degraded()
		require.Positive(t, degraded)

		proxy.up.Store(true)
		// Once it answers, from the first count after StoreRetry.
		time.Sleep(ratelimit.StoreRetry)
		degraded = e.App.Limits.Degraded()
		for range 3 {
			require.Equal(t, http.StatusOK, e.Do("GET", "/api/agents", free.Key, nil).Status)
		}
		require.Equal(t, degraded, e.App.Limits.Degraded(), "counted in Redis once it answers")
		opts, err := redis.ParseURL(dbtest.RedisURL())
		require.NoError(t, err)
		rdb := redis.NewClient(opts)
		t.Cleanup(func() { rdb.Close() })
		keys, err := rdb.Keys(context.Background(), prefix+":*").Result()
		require.NoError(t, err)
		require.NotEmpty(t, keys, "the counts are in Redis")
	})

	t.Run("a malformed URL is refused", func(t *testing.T) {
		t.Parallel()
		u := dbtest.New(t)
		for _, bad := range []string{"redis://127.0.0.1:6379/not-a-db", "http://127.0.0.1:6379"} {
			app, err := server.New(context.Background(), server.Config{DatabaseURL: u, RedisURL: bad})
			if app != nil {
				app.Close()
			}
			require.ErrorContains(t, err, "--redis-url", bad)
		}
	})

	// A Redis that answers, refusing the URL's database or password, is a
	// setting that never works, not an outage: the instance started and
	// counted on its own for good, logging a warning every 30 s.
	t.Run("a URL Redis refuses is refused", func(t *testing.T) {
		t.Parallel()
		u := dbtest.New(t)
		target, err := url.Parse(dbtest.RedisURL())
		require.NoError(t, err)
		noDB := *target
		noDB.Path = "/9999"
		wrongUser := *target
		wrongUser.User = url.UserPassword("parley-no-such-user", "s3cret")
		for _, bad := range []string{noDB.String(), wrongUser.String()} {
			app, err := server.New(context.Background(), server.Config{DatabaseURL: u, RedisURL: bad})
			if app != nil {
				app.Close()
			}
			require.ErrorContains(t, err, "--redis-url", bad)
			require.NotContains(t, err.Error(), "s3cret", bad)
		}
	})

	// SECURITY: the error goes to the log (or stderr) at start: a URL
	// url.Parse refuses (a password's # or % not escaped) is named
	// without its password, nor a piece of it.
	t.Run("a URL that does not parse is refused without its password", func(t *testing.T) {
		t.Parallel()
		u := dbtest.New(t)
		for _, bad := range []string{"redis://:s3cr%zzet@127.0.0.1:6379/0", "redis://:s3cr#et@127.0.0.1:6379/0"} {
			app, err := server.New(context.Background(), server.Config{DatabaseURL: u, RedisURL: bad})
			if app != nil {
				app.Close()
			}
			require.ErrorContains(t, err, "--redis-url", bad)
			require.NotContains(t, err.Error(), "s3cr", bad)
			require.ErrorContains(t, err, "redis://:xxxxx@127.0.0.1:6379/0", bad)
		}
	})
}

// silentRedis accepts connections and never answers them: a Redis host
// that hangs, or a network that drops packets, where each call waits for
// its whole timeout rather than failing at once.
func silentRedis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return "redis://" + ln.Addr().String() + "/0"
}

// A Redis that stops answering costs one call's timeout now and then, not
// one on every count: the organization's usage (one read per key, on every
// console page and GetOrganization) took 300 ms a key, 30 s for an
// organization's 100 keys, and every request waited 300 ms (a visitor's,
// counted twice, 600 ms) for as long as Redis was silent.
func TestSilentRedisDoesNotSlowEveryRequest(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, func(c *server.Config) { c.RedisURL, c.RedisPrefix = silentRedis(t), randomPrefix() })
	ctx := context.Background()
	require.NoError(t, e.App.Store.Tenant(ctx, e.A.ID, func(q *dbq.Queries) error {
		for i := range 30 {
			hash := make([]byte, 32)
			_, _ = rand.Read(hash)
			if _, err := q.CreateAPIKey(ctx, dbq.CreateAPIKeyParams{
				OrgID: e.A.ID, ID: uuid.New(), Name: fmt.Sprint("k", i), KeyHash: hash, DisplayPrefix: "pk_test",
				Plan: "pro", Scopes: []string{"admin", "chat"}, CreatedBy: "test",
			}); err != nil {
				return err
			}
		}
		return nil
	}))
	orgs := parleyv1connect.NewOrganizationServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	start := time.Now()
	resp, err := orgs.GetOrganization(ctx, &parleyv1.GetOrganizationRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetUsage(), 31)
	require.Less(t, time.Since(start), 3*time.Second, "31 keys' usage read while Redis is silent")

	start = time.Now()
	for range 10 {
		require.Equal(t, http.StatusOK, e.Do("GET", "/api/agents", e.A.Key, nil).Status)
	}
	require.Less(t, time.Since(start), 2*time.Second, "10 requests while Redis is silent")
	require.Positive(t, e.App.Limits.Degraded())
}

// A Redis gone from the network costs a count one dial a try (each bounded
// by the dial timeout, with one retry), not go-redis's five: a host whose
// packets were dropped held the count 3.8 s (ten dials of 300 ms, and the
// waits between them), and a refused port 0.8 s.
func TestRedisDownCostsOneDialATry(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())
	opts, err := server.RedisOptions("redis://" + closed + "/0")
	require.NoError(t, err)
	var dials atomic.Int64
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	// go-redis stops dialing once the pool has failed as many dials as it
	// holds connections: far from it here, so that every try dials.
	opts.PoolSize = 1000
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	l, err := ratelimit.NewRedis(client, randomPrefix())
	require.NoError(t, err)
	dials.Store(0)
	res, err := l.Allow(context.Background(), "k", plan.Limits{PerMinute: 3, PerDay: 10})
	require.NoError(t, err)
	require.True(t, res.Allowed, "counted in the instance")
	require.EqualValues(t, 1+opts.MaxRetries, dials.Load(), "dials of one count")
}

// go-redis's own messages (here: a dial refused at start) go to the JSON
// log, not as plain "redis: 2026/11/28 ... pool.go:770: ..." lines of its
// default logger among the JSON records on stderr.
func TestRedisClientMessagesAreJSONLogs(t *testing.T) {
	// Not parallel: the default logger is the process's.
	var buf syncbuf.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())
	app, err := server.New(context.Background(), server.Config{DatabaseURL: dbtest.New(t), RedisURL: "redis://" + closed + "/0"})
	require.NoError(t, err)
	app.Close()
	require.Contains(t, buf.String(), `"msg":"redis client"`)
	require.Contains(t, buf.String(), "failed to dial")
}
