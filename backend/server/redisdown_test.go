package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
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
			require.ErrorContains(t, err, "redis url", bad)
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
			require.ErrorContains(t, err, "redis url", bad)
			require.NotContains(t, err.Error(), "s3cr", bad)
			require.ErrorContains(t, err, "redis://:xxxxx@127.0.0.1:6379/0", bad)
		}
	})
}
