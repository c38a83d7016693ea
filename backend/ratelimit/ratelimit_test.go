package ratelimit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
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
	// The store tells the window's end to the second: one more to be sure
	// it is over (TestRetryAfterIsNeverEarly).
	require.True(t, ra >= time.Second && ra <= time.Minute+time.Second, "retry after %v", ra)
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

// A refused caller that comes back after Retry-After, or at
// X-RateLimit-Reset, must find its window over. The store reports a
// window's end in whole seconds, rounded down: the window runs up to a
// second past it. Started in the second half of a second, the window's end
// as reported, and Retry-After rounded to the nearest second, both fell
// before its real end, and the caller who obeyed them was refused again.
func TestRetryAfterIsNeverEarly(t *testing.T) {
	t.Parallel()
	for time.Now().Nanosecond() < 600_000_000 || time.Now().Nanosecond() > 700_000_000 {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	l := ratelimit.NewMemory()
	lim := plan.Limits{PerMinute: 1, PerDay: 100}
	key := randomKey()
	ctx := context.Background()
	first, err := l.Allow(ctx, key, lim)
	require.NoError(t, err)
	require.True(t, first.Allowed)
	second, err := l.Allow(ctx, key, lim)
	require.NoError(t, err)
	require.False(t, second.Allowed)
	now := time.Now()
	// The window began after start and lasts a minute.
	end := start.Add(time.Minute)
	require.False(t, second.Reset.Before(end), "reset reported at %v, before the window's end %v", second.Reset, end)
	ra := second.RetryAfter(now)
	require.Equal(t, time.Duration(0), ra%time.Second, "retry after %v: whole seconds", ra)
	require.False(t, now.Add(ra).Before(end), "retry after %v comes back at %v, before the window's end %v", ra, now.Add(ra), end)
	require.LessOrEqual(t, ra, time.Minute+time.Second)

	h := http.Header{}
	ratelimit.WriteHeaders(h, &second, now)
	reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	require.NoError(t, err)
	require.False(t, time.Unix(reset, 0).Before(end), "X-RateLimit-Reset %d is before the window's end %v", reset, end)
	secs, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
	require.NoError(t, err)
	require.False(t, now.Add(time.Duration(secs)*time.Second).Before(end), "Retry-After: %d is early", secs)

	// Retry-After rounds up: rounded to the nearest second, 30.3 s to go
	// was 30, before Reset.
	at := time.Unix(1_800_000_000, 0)
	for _, left := range []time.Duration{30300 * time.Millisecond, 59001 * time.Millisecond, 400 * time.Millisecond} {
		ra := ratelimit.Result{Reset: at}.RetryAfter(at.Add(-left))
		require.GreaterOrEqual(t, ra, left, "%v before Reset", left)
		require.Less(t, ra, left+time.Second, "%v before Reset", left)
	}
}

// A key whose day is spent is told to come back when the day window ends,
// also when its minute is spent too: requests refused by the day still
// count against the minute, and a minute's refusal used to report the
// minute window alone (Retry-After at most 61 s, X-RateLimit-Reset within
// the minute), so a caller that obeyed came back to be refused by the day
// again, once a minute, all day.
func TestMinuteRefusalReportsASpentDay(t *testing.T) {
	t.Parallel()
	for _, lim := range []plan.Limits{
		{PerMinute: 3, PerDay: 2}, // the day refuses first, then the minute
		{PerMinute: 2, PerDay: 2}, // both spent at once: the minute refuses
	} {
		for name, l := range map[string]*ratelimit.Limiter{
			"memory": ratelimit.NewMemory(),
			"redis":  redisLimiter(t, "parley-test:"+randomKey()),
		} {
			t.Run(fmt.Sprintf("%s/%d a minute", name, lim.PerMinute), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				key := randomKey()
				var last ratelimit.Result
				for i := range 6 {
					res, err := l.Allow(ctx, key, lim)
					require.NoError(t, err)
					require.Equal(t, i < 2, res.Allowed, "request %d", i+1)
					last = res
					if i < 2 {
						continue
					}
					require.Greater(t, res.RetryAfter(time.Now()), time.Hour, "request %d: told to come back before the day is over", i+1)
					require.EqualValues(t, 2, res.Limit, "request %d reports the day's window", i+1)
					require.Zero(t, res.Remaining)
				}
				h := http.Header{}
				ratelimit.WriteHeaders(h, &last, time.Now())
				secs, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
				require.NoError(t, err)
				require.Greater(t, secs, int64(3600))
			})
		}
	}
}

// A count that fails for the request's own sake (its client went away, its
// deadline passed) does not leave the shared store alone for StoreRetry:
// a client could otherwise turn the counts shared by the instances off,
// and get a limit per instance.
func TestACanceledRequestKeepsTheSharedStore(t *testing.T) {
	t.Parallel()
	prefix := "parley-test:" + randomKey()
	l, other := redisLimiter(t, prefix), redisLimiter(t, prefix)
	lim := plan.Limits{PerMinute: 10, PerDay: 100}
	key := randomKey()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := l.Allow(canceled, key, lim)
	require.NoError(t, err)
	require.EqualValues(t, 1, l.Degraded(), "counted in the process")
	for range 2 {
		res, err := l.Allow(context.Background(), key, lim)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	require.EqualValues(t, 1, l.Degraded(), "the next counts went to Redis")
	u, err := other.Peek(context.Background(), key, lim)
	require.NoError(t, err)
	require.EqualValues(t, 2, u.Minute, "another instance reads them")
}

// hungRedis accepts connections and reads what they send, answering
// nothing (a hung host). It counts the attempts to ask it: each opens a
// connection (the one before timed out and was closed) and says HELLO.
func hungRedis(t *testing.T) (addr string, asked *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	asked = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					asked.Add(int64(strings.Count(strings.ToLower(string(buf[:n])), "hello")))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), asked
}

// After a hung Redis failed a count, the requests StoreRetry later do not
// all ask it again at once: one does (and waits its timeout), the others
// count in this process meanwhile. All asked, every request of that
// moment waited the timeout, each StoreRetry, for as long as Redis hung.
func TestOneRequestAsksAHungRedisAgain(t *testing.T) {
	t.Parallel()
	addr, asked := hungRedis(t)
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, PoolSize: 32})
	t.Cleanup(func() { client.Close() })
	l, err := ratelimit.NewRedis(client, "hung")
	require.NoError(t, err)
	lim := plan.Limits{PerMinute: 100, PerDay: 1000}
	_, err = l.Allow(context.Background(), "k", lim)
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // what was sent has arrived
	before := asked.Load()
	require.Positive(t, before, "the first count asked Redis")

	time.Sleep(ratelimit.StoreRetry)
	require.Equal(t, 20, burst(t, 20, "k", lim, l), "every request is counted (here)")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, before+1, asked.Load(), "one request of the burst asked Redis again")
	require.EqualValues(t, 21, l.Degraded())
}
