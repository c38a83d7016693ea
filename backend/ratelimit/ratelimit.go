// Package ratelimit counts requests per API key per minute and per day on
// ulule/limiter, in memory for one instance or in Redis so that several
// instances share exact counts.
package ratelimit

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/store/memory"
	redisstore "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/parleyhq/parley/backend/plan"
)

// Limiter applies plan limits to keys.
type Limiter struct {
	store limiter.Store

	mu     sync.Mutex
	byRate map[limiter.Rate]*limiter.Limiter

	// fallback counts in this process while the shared store (Redis)
	// fails: limits then hold per instance instead of across them, and no
	// request fails for it. Nil for a memory limiter.
	fallback *Limiter
	degraded atomic.Int64
	warned   atomic.Int64 // unix seconds of the last warning
	// retryAt is when (Unix nanoseconds) to ask the shared store again
	// after it failed: until then counts go straight to fallback. 0: the
	// store answered last (resting).
	retryAt atomic.Int64
}

// StoreRetry is how long counts stay in this process after the shared
// store failed before it is asked again. A Redis that stops answering (a
// hung host, dropped packets) fails each call only at its timeout: asked
// on every count, it held every request that long (a visitor's, counted
// twice, twice as long) and the organization's usage, read key by key, a
// timeout per key.
const StoreRetry = time.Second

// NewMemory counts in this process only.
func NewMemory() *Limiter {
	return &Limiter{store: memory.NewStoreWithOptions(limiter.StoreOptions{
		Prefix:          "parley",
		CleanUpInterval: time.Minute,
	}), byRate: map[limiter.Rate]*limiter.Limiter{}}
}

// NewRedis counts in Redis under prefix, shared by every instance that uses
// the same Redis and prefix.
func NewRedis(client redis.UniversalClient, prefix string) (*Limiter, error) {
	store, err := redisstore.NewStoreWithOptions(scriptsLoadedLater{client}, limiter.StoreOptions{Prefix: prefix})
	if err != nil {
		return nil, fmt.Errorf("rate limit store: %w", err)
	}
	return &Limiter{store: store, byRate: map[limiter.Rate]*limiter.Limiter{}, fallback: NewMemory()}, nil
}

// scriptsLoadedLater lets the rate-limit store be made while Redis is down.
// The store loads its Lua scripts when made and runs them by SHA1 after; a
// script Redis lacks (NOSCRIPT: never loaded, or Redis restarted) is loaded
// again on first use. So when Redis cannot load them now, their SHA1s (what
// SCRIPT LOAD answers) stand in, and the first call after Redis is back
// loads them.
type scriptsLoadedLater struct{ redis.UniversalClient }

// ScriptLoad implements redis.Scripter.
func (c scriptsLoadedLater) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	cmd := c.UniversalClient.ScriptLoad(ctx, script)
	if cmd.Err() != nil {
		sum := sha1.Sum([]byte(script))
		cmd = redis.NewStringResult(hex.EncodeToString(sum[:]), nil)
	}
	return cmd
}

// Degraded is how many requests were counted in this process because the
// shared store failed.
func (l *Limiter) Degraded() int64 { return l.degraded.Load() }

// resting reports whether the request is to be counted in this process,
// counting it as degraded if so: the shared store failed less than
// StoreRetry ago, or it failed before and another request is asking it
// again. Once StoreRetry has passed, one request (the first to come) asks
// the store and the others count here until it has answered or StoreRetry
// passes again: when the store still hangs, one request waits its timeout
// each StoreRetry, not all the requests of that moment. A request the
// store answers closes the breaker (healthy).
func (l *Limiter) resting() bool {
	if l.fallback == nil {
		return false
	}
	at := l.retryAt.Load()
	if at == 0 {
		return false
	}
	if now := time.Now().UnixNano(); now >= at && l.retryAt.CompareAndSwap(at, now+int64(StoreRetry)) {
		return false // the trial
	}
	l.degraded.Add(1)
	return true
}

// healthy records that the shared store answered.
func (l *Limiter) healthy() {
	if l.retryAt.Load() != 0 {
		l.retryAt.Store(0)
	}
}

// degrade records a failure of the shared store, warning at most once every
// 30 s, and returns the limiter to count with instead. The store is left
// alone for StoreRetry, unless the failure is the request's own (its client
// went away, its deadline passed): a client must not be able to turn the
// shared counts off.
func (l *Limiter) degrade(ctx context.Context, err error) *Limiter {
	l.degraded.Add(1)
	if ctx.Err() == nil {
		l.retryAt.Store(time.Now().Add(StoreRetry).UnixNano())
	}
	now := time.Now().Unix()
	if last := l.warned.Load(); now-last >= 30 && l.warned.CompareAndSwap(last, now) {
		slog.WarnContext(ctx, "rate limits: the shared store fails; counting per instance until it answers", "err", err)
	}
	return l.fallback
}

func (l *Limiter) forRate(period time.Duration, n int64) *limiter.Limiter {
	r := limiter.Rate{Period: period, Limit: n}
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.byRate[r]
	if !ok {
		lim = limiter.New(l.store, r)
		l.byRate[r] = lim
	}
	return lim
}

// Result is the outcome of one request against the limits. Limit, Remaining
// and Reset describe the window that decided it: the minute window unless the
// day window is exhausted.
type Result struct {
	Allowed   bool
	Limit     int64
	Remaining int64
	Reset     time.Time
}

// RetryAfter is how long a refused caller should wait, in whole seconds
// rounded up (at least one): a caller that waits that long finds the
// window over, never one that comes back a moment too soon.
func (r Result) RetryAfter(now time.Time) time.Duration {
	d := r.Reset.Sub(now)
	if d < time.Second {
		return time.Second
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// Allow counts one request of key. A request refused by the minute limit does
// not count against the day. When Redis fails, the request is counted in
// this process instead (see fallback), and so are the requests of the next
// StoreRetry: a store outage degrades exactness across instances, never
// availability.
func (l *Limiter) Allow(ctx context.Context, key string, lim plan.Limits) (Result, error) {
	if l.resting() {
		return l.fallback.allow(ctx, key, lim)
	}
	res, err := l.allow(ctx, key, lim)
	if err != nil && l.fallback != nil {
		return l.degrade(ctx, err).allow(ctx, key, lim)
	}
	if err == nil {
		l.healthy()
	}
	return res, err
}

func (l *Limiter) allow(ctx context.Context, key string, lim plan.Limits) (Result, error) {
	m, err := l.forRate(time.Minute, lim.PerMinute).Get(ctx, key+":m")
	if err != nil {
		return Result{}, fmt.Errorf("rate limit: %w", err)
	}
	if m.Reached {
		// The day may be spent too (requests it refused still count against
		// the minute): then the day's window is the one to wait for, and
		// reporting the minute's would send the caller back to be refused
		// again. Read without counting: a request the minute refuses does
		// not count against the day.
		d, err := l.forRate(24*time.Hour, lim.PerDay).Peek(ctx, key+":d")
		if err != nil {
			return Result{}, fmt.Errorf("rate limit: %w", err)
		}
		if d.Remaining == 0 && d.Reset > m.Reset {
			res := result(d)
			res.Allowed = false
			return res, nil
		}
		return result(m), nil
	}
	d, err := l.forRate(24*time.Hour, lim.PerDay).Get(ctx, key+":d")
	if err != nil {
		return Result{}, fmt.Errorf("rate limit: %w", err)
	}
	if d.Reached || d.Remaining < m.Remaining {
		return result(d), nil
	}
	return result(m), nil
}

func result(c limiter.Context) Result {
	// c.Reset is the window's end in Unix seconds rounded down: the window
	// runs up to a second past it. Reset is the second after, so that a
	// caller told to come back then (X-RateLimit-Reset, Retry-After) is not
	// refused again by the same window.
	return Result{Allowed: !c.Reached, Limit: c.Limit, Remaining: c.Remaining, Reset: time.Unix(c.Reset+1, 0)}
}

// Usage is how many requests a key made in the current minute and day.
type Usage struct {
	Minute, Day int64
}

// Peek reads a key's counts without counting (this process's counts while
// Redis fails).
func (l *Limiter) Peek(ctx context.Context, key string, lim plan.Limits) (Usage, error) {
	if l.resting() {
		return l.fallback.peek(ctx, key, lim)
	}
	u, err := l.peek(ctx, key, lim)
	if err != nil && l.fallback != nil {
		return l.degrade(ctx, err).peek(ctx, key, lim)
	}
	if err == nil {
		l.healthy()
	}
	return u, err
}

func (l *Limiter) peek(ctx context.Context, key string, lim plan.Limits) (Usage, error) {
	m, err := l.forRate(time.Minute, lim.PerMinute).Peek(ctx, key+":m")
	if err != nil {
		return Usage{}, err
	}
	d, err := l.forRate(24*time.Hour, lim.PerDay).Peek(ctx, key+":d")
	if err != nil {
		return Usage{}, err
	}
	return Usage{Minute: m.Limit - m.Remaining, Day: d.Limit - d.Remaining}, nil
}

// WriteHeaders sets X-RateLimit-Limit, -Remaining and -Reset (Unix seconds)
// from r and, when r refused the request, Retry-After (seconds).
func WriteHeaders(h http.Header, r *Result, now time.Time) {
	if r == nil {
		return
	}
	h.Set("X-RateLimit-Limit", strconv.FormatInt(r.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(r.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(r.Reset.Unix(), 10))
	if !r.Allowed {
		h.Set("Retry-After", strconv.FormatInt(int64(r.RetryAfter(now)/time.Second), 10))
	}
}
