package ratelimit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/ratelimit"
)

// burst fires n concurrent requests for key spread over the limiters and
// returns how many were allowed.
func burst(t *testing.T, n int, key string, lim plan.Limits, limiters ...*ratelimit.Limiter) int {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := limiters[i%len(limiters)].Allow(context.Background(), key, lim)
			if err != nil {
				t.Error(err)
				return
			}
			if res.Allowed {
				allowed.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	return int(allowed.Load())
}

func randomKey() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func redisLimiter(t *testing.T, prefix string) *ratelimit.Limiter {
	t.Helper()
	opts, err := redis.ParseURL(dbtest.RedisURL())
	require.NoError(t, err)
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	require.NoError(t, client.Ping(context.Background()).Err(), "Redis must run at %s (make test starts it)", dbtest.RedisURL())
	l, err := ratelimit.NewRedis(client, prefix)
	require.NoError(t, err)
	return l
}

func TestExactAtTheBoundaryUnderABurst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lim  plan.Limits
		want int
	}{
		{"free minute", plan.Limits{PerMinute: 10, PerDay: 1000}, 10},
		{"starter minute", plan.Limits{PerMinute: 60, PerDay: 10000}, 60},
		{"day below minute", plan.Limits{PerMinute: 300, PerDay: 7}, 7},
	} {
		t.Run("memory/"+tc.name, func(t *testing.T) {
			t.Parallel()
			l := ratelimit.NewMemory()
			key := randomKey()
			if got := burst(t, tc.want+25, key, tc.lim, l); got != tc.want {
				t.Fatalf("allowed %d of a burst, want exactly %d", got, tc.want)
			}
			if got := burst(t, 1, key, tc.lim, l); got != 0 {
				t.Fatalf("request N+1 allowed")
			}
		})
		t.Run("two instances sharing redis/"+tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := "parley-test:" + randomKey()
			one, two := redisLimiter(t, prefix), redisLimiter(t, prefix)
			key := randomKey()
			if got := burst(t, tc.want+25, key, tc.lim, one, two); got != tc.want {
				t.Fatalf("allowed %d of a burst over two instances, want exactly %d", got, tc.want)
			}
			if got := burst(t, 2, key, tc.lim, one, two); got != 0 {
				t.Fatalf("a request past the limit was allowed")
			}
		})
	}
}

func TestKeysAreCountedApart(t *testing.T) {
	t.Parallel()
	l := ratelimit.NewMemory()
	lim := plan.Limits{PerMinute: 3, PerDay: 100}
	a, b := randomKey(), randomKey()
	require.Equal(t, 3, burst(t, 5, a, lim, l))
	require.Equal(t, 3, burst(t, 5, b, lim, l))
	u, err := l.Peek(context.Background(), a, lim)
	require.NoError(t, err)
	require.EqualValues(t, 3, u.Minute)
}

func TestResultReportsRetryAfter(t *testing.T) {
	t.Parallel()
	l := ratelimit.NewMemory()
	lim := plan.Limits{PerMinute: 1, PerDay: 100}
	key := randomKey()
	ctx := context.Background()
	first, err := l.Allow(ctx, key, lim)
	require.NoError(t, err)
	require.True(t, first.Allowed)
	require.EqualValues(t, 0, first.Remaining)
	second, err := l.Allow(ctx, key, lim)
	require.NoError(t, err)
	require.False(t, second.Allowed)
	ra := second.RetryAfter(time.Now())
	require.True(t, ra >= time.Second && ra <= time.Minute, "retry after %v", ra)
}

// With Redis down, requests are counted in this process: limits still hold
// (per instance), and nothing fails.
func TestRedisDownFallsBackToThisProcess(t *testing.T) {
	t.Parallel()
	opts, err := redis.ParseURL(dbtest.RedisURL())
	require.NoError(t, err)
	client := redis.NewClient(opts)
	l, err := ratelimit.NewRedis(client, "down-"+randomKey())
	require.NoError(t, err)
	require.NoError(t, client.Close()) // Redis is gone from here on
	lim := plan.Limits{PerMinute: 3, PerDay: 100}
	var allowed int
	for range 5 {
		res, err := l.Allow(context.Background(), "k", lim)
		require.NoError(t, err)
		if res.Allowed {
			allowed++
		}
	}
	require.Equal(t, 3, allowed)
	require.EqualValues(t, 5, l.Degraded())
	u, err := l.Peek(context.Background(), "k", lim)
	require.NoError(t, err)
	require.EqualValues(t, 3, u.Minute)
}
