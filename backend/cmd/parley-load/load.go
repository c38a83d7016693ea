package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/parleyhq/parley/backend/llm/fakeopenai"
)

// call makes one request; it returns when the measured event happened (the
// whole answer, or the first token of a stream).
type call func(ctx context.Context, n int64) (time.Time, error)

type runner struct {
	env *env
	cfg config
	seq atomic.Int64
}

// result is one phase's latencies and errors.
type result struct {
	lats    []time.Duration
	errs    map[string]int
	elapsed time.Duration
	// made is every request the phase sent: counted, failed, or in the
	// warm-up.
	made int
}

func (r *result) rps() float64 { return float64(len(r.lats)) / r.elapsed.Seconds() }

func (r *result) p(q float64) time.Duration {
	if len(r.lats) == 0 {
		return 0
	}
	i := int(float64(len(r.lats))*q/100+0.5) - 1
	return r.lats[min(max(i, 0), len(r.lats)-1)]
}

func header() {
	fmt.Printf("   %-16s %10s %9s %9s %9s %9s %s\n", "target", "req/s", "p50", "p95", "p99", "max", "errors")
}

func (r *result) print(name string) {
	slices.Sort(r.lats)
	errs := "0"
	if len(r.errs) > 0 {
		var parts []string
		for k, v := range r.errs {
			parts = append(parts, fmt.Sprintf("%d× %s", v, k))
		}
		sort.Strings(parts)
		errs = strings.Join(parts, "; ")
	}
	fmt.Printf("   %-16s %10.0f %9s %9s %9s %9s %s\n", name, r.rps(), ms(r.p(50)), ms(r.p(95)), ms(r.p(99)), ms(r.p(100)), errs)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// collector gathers the results of concurrent requests.
type collector struct {
	mu   sync.Mutex
	lats []time.Duration
	errs map[string]int
}

func (c *collector) add(lat time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.errs == nil {
			c.errs = map[string]int{}
		}
		msg := err.Error()
		if len(msg) > 120 {
			msg = msg[:120] + "…"
		}
		c.errs[msg]++
		return
	}
	c.lats = append(c.lats, lat)
}

// closed runs clients that each send their next request when the last is
// answered: for the warm-up (whose requests are not counted: the first
// ones open connections, on both sides, and pay for it), then for the
// configured duration. Requests in flight at the end are waited for (and
// counted), not cut: a cut turn is not what is measured.
func (r *runner) closed(ctx context.Context, name string, clients int, fn call) *result {
	var c, warm collector
	var wg sync.WaitGroup
	var made atomic.Int64
	begin := time.Now()
	start := begin.Add(r.cfg.warmup)
	end := start.Add(r.cfg.duration)
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				t0 := time.Now()
				rctx, cancel := context.WithTimeout(ctx, time.Minute)
				done, err := fn(rctx, r.seq.Add(1))
				cancel()
				made.Add(1)
				if t0.Before(start) {
					warm.add(done.Sub(t0), err)
				} else {
					c.add(done.Sub(t0), err)
				}
			}
		})
	}
	wg.Wait()
	res := &result{lats: c.lats, errs: c.errs, elapsed: time.Since(start), made: int(made.Load())}
	res.print(name)
	if r.cfg.warmup > 0 && len(warm.lats) > 0 {
		slices.Sort(warm.lats)
		w := &result{lats: warm.lats}
		fmt.Printf("   %-16s %d requests in the %s warm-up, not counted: p50 %s, max %s\n", "", len(warm.lats), r.cfg.warmup, ms(w.p(50)), ms(w.p(100)))
	}
	return res
}

// open sends rate requests a second on a fixed schedule, whatever the
// answers' latency; each latency counts from the request's scheduled start
// (no coordinated omission).
func (r *runner) open(ctx context.Context, name string, rate int, fn call) *result {
	var c collector
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	total := int(r.cfg.duration / interval)
	start := time.Now()
	for i := range total {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			done, err := fn(rctx, r.seq.Add(1))
			c.add(done.Sub(at), err)
		})
	}
	wg.Wait()
	res := &result{lats: c.lats, errs: c.errs, elapsed: r.cfg.duration}
	res.print(name)
	return res
}

// primeTurns is how many turns prime prepares the database with.
const primeTurns = 400

// prime sends primeTurns JSON turns, then has Postgres ANALYZE the run's
// database, so that the phases measure a database that has statistics, as
// one that has been running does (autovacuum analyzes a table once 50 rows
// and a tenth of it have changed, within a minute). A database made a
// moment ago has none, and Postgres plans blind: it read a question's
// conversation through an index of the agent's every conversation instead
// of the primary key (issue 13; docs/benchmarks.md). It returns how long
// priming took.
func (r *runner) prime(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	var first atomic.Value
	next := atomic.Int64{}
	for range min(r.cfg.clients, 16) {
		wg.Go(func() {
			for next.Add(1) <= primeTurns && ctx.Err() == nil {
				rctx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := r.parleyJSON(rctx, r.seq.Add(1))
				cancel()
				if err != nil && failed.Add(1) == 1 {
					first.Store(err)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return 0, fmt.Errorf("priming: %d of %d turns failed, the first: %w", failed.Load(), primeTurns, err)
	}
	if _, err := r.env.floorPool.Exec(ctx, "ANALYZE"); err != nil {
		return 0, fmt.Errorf("priming: ANALYZE: %w", err)
	}
	return time.Since(start), ctx.Err()
}

func (r *runner) conversation(n int64) string { return fmt.Sprintf("load-%d", n) }

func (r *runner) post(ctx context.Context, url, body string, stream bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+r.env.key)
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := r.env.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		resp.Body.Close()
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp, nil
}

// whole reads a JSON answer to its end.
func (r *runner) whole(ctx context.Context, url, body string) (time.Time, error) {
	resp, err := r.post(ctx, url, body, false)
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return time.Now(), err
}

const modelBody = `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello"}]`

func (r *runner) modelJSON(ctx context.Context, _ int64) (time.Time, error) {
	return r.whole(ctx, r.env.modelURL+"/v1/chat/completions", modelBody+"}")
}

func (r *runner) floor(ctx context.Context, n int64) (time.Time, error) {
	return r.whole(ctx, r.env.floorURL, fmt.Sprintf(`{"query":"Hello","conversationId":%q}`, r.conversation(n)))
}

func (r *runner) floorProxy(ctx context.Context, n int64) (time.Time, error) {
	return r.whole(ctx, r.env.floorProxyURL, fmt.Sprintf(`{"query":"Hello","conversationId":%q}`, r.conversation(n)))
}

func (r *runner) promises(ctx context.Context, n int64) (time.Time, error) {
	return r.whole(ctx, r.env.promisesURL, fmt.Sprintf(`{"query":"Hello","conversationId":%q}`, r.conversation(n)))
}

func (r *runner) chatURL() string {
	return r.env.parleyURL + "/api/v2/agent/" + r.env.agentID + "/chat"
}

// parleyJSON is a JSON turn in a conversation of its own.
func (r *runner) parleyJSON(ctx context.Context, n int64) (time.Time, error) {
	return r.whole(ctx, r.chatURL(), fmt.Sprintf(`{"query":"Hello","conversationId":%q}`, r.conversation(n)))
}

// modelTTFT streams from the fake model directly, until its first token.
func (r *runner) modelTTFT(ctx context.Context, _ int64) (time.Time, error) {
	resp, err := r.post(ctx, r.env.modelURL+"/v1/chat/completions", modelBody+`,"stream":true}`, true)
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	first := time.Time{}
	err = events(resp.Body, func(data []byte) bool {
		if first.IsZero() && bytes.Contains(data, []byte(`"delta":{"content":"`)) {
			first = time.Now()
		}
		return true
	})
	if err == nil && first.IsZero() {
		err = errors.New("no token")
	}
	return first, err
}

// parleyTTFT streams a turn, to its end; it returns its first token's time.
func (r *runner) parleyTTFT(ctx context.Context, n int64) (time.Time, error) {
	s, err := r.parleyStream(ctx, n)
	return s.first, err
}

// stream is what one streamed turn showed.
type stream struct {
	first, last time.Time
	tokens      int
	worstGap    time.Duration
}

func (r *runner) parleyStream(ctx context.Context, n int64) (stream, error) {
	var s stream
	resp, err := r.post(ctx, r.chatURL(), fmt.Sprintf(`{"query":"Hello","conversationId":%q,"streaming":true}`, r.conversation(n)), true)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	var failed error
	done := false
	err = events(resp.Body, func(data []byte) bool {
		switch eventType(data) {
		case "token":
			now := time.Now()
			if s.tokens == 0 {
				s.first = now
			} else {
				s.worstGap = max(s.worstGap, now.Sub(s.last))
			}
			s.last = now
			s.tokens++
		case "error":
			failed = fmt.Errorf("error event: %s", data)
			return false
		case "done":
			done = true
		}
		return true
	})
	switch {
	case err != nil:
		return s, err
	case failed != nil:
		return s, failed
	case !done || s.tokens == 0:
		return s, fmt.Errorf("stream ended without done event (%d tokens)", s.tokens)
	}
	return s, nil
}

// events calls fn with each SSE data line's payload, until fn returns false
// or the stream ends.
func events(body io.Reader, fn func(data []byte) bool) error {
	br := bufio.NewReaderSize(body, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			if !fn(bytes.TrimSpace(d)) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// eventType is the "type" of an event's JSON without decoding all of it.
func eventType(data []byte) string {
	_, rest, ok := bytes.Cut(data, []byte(`"type":"`))
	if !ok {
		return ""
	}
	t, _, _ := bytes.Cut(rest, []byte(`"`))
	return string(t)
}

// held opens n streamed turns against a fake model that drips a token every
// gap for hold, all open at once once ramped up, and reports their errors,
// worst gaps between tokens and Parley's memory.
func (r *runner) held(ctx context.Context, n int) {
	tokens := int(r.cfg.hold / r.cfg.gap)
	drip := &fakeopenai.Model{Gap: r.cfg.gap}
	for range tokens {
		drip.Tokens = append(drip.Tokens, " tok")
	}
	r.env.model.Store(drip)
	defer r.env.model.Store(r.env.fast)
	// Ramp: at most rampPerSec new streams a second, so the listen queues
	// do not overflow; the hold is long enough for all to overlap.
	const rampPerSec = 2000
	fmt.Printf("== %d held streams: a token every %s for %s, opened at %d/s ==\n", n, r.cfg.gap, r.cfg.hold, rampPerSec)
	// This process holds two descriptors a stream (its client's connection
	// and the fake model's), as Parley does; Go raised the soft limit to
	// the hard one at start, for Parley too.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(2*n+1024) {
		fmt.Printf("   warning: %d open files at most (ulimit -n): too few for %d streams, some will fail to connect; raise the hard limit\n", lim.Cur, n)
	}
	var (
		mu      sync.Mutex
		gaps    []time.Duration
		ttfts   []time.Duration
		errs    = map[string]int{}
		open    atomic.Int64
		maxOpen atomic.Int64
		wg      sync.WaitGroup
	)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / rampPerSec)); d > 0 {
			time.Sleep(d)
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, r.cfg.hold+time.Minute)
			defer cancel()
			t0 := time.Now()
			o := open.Add(1)
			for m := maxOpen.Load(); o > m && !maxOpen.CompareAndSwap(m, o); m = maxOpen.Load() {
			}
			s, err := r.parleyStream(rctx, r.seq.Add(1))
			open.Add(-1)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				msg := err.Error()
				if len(msg) > 120 {
					msg = msg[:120] + "…"
				}
				errs[msg]++
				return
			}
			gaps = append(gaps, s.worstGap)
			ttfts = append(ttfts, s.first.Sub(t0))
		})
	}
	wg.Wait()
	peak, now := r.env.rss()
	g := &result{lats: gaps, elapsed: time.Since(start)}
	t := &result{lats: ttfts, elapsed: g.elapsed}
	slices.Sort(g.lats)
	slices.Sort(t.lats)
	fmt.Printf("   streams: %d complete, %d failed, %d open at once at most, in %s\n", len(gaps), n-len(gaps), maxOpen.Load(), g.elapsed.Round(100*time.Millisecond))
	over := 0
	for _, d := range g.lats {
		if d > 250*time.Millisecond {
			over++
		}
	}
	fmt.Printf("   worst gap between tokens, per stream: p50 %s  p99 %s  max %s; %d streams had a gap over 250ms (the model's own gap: %s)\n",
		ms(g.p(50)), ms(g.p(99)), ms(g.p(100)), over, r.cfg.gap)
	fmt.Printf("   time to first token: p50 %s  p99 %s  max %s\n", ms(t.p(50)), ms(t.p(99)), ms(t.p(100)))
	fmt.Printf("   parley memory: peak RSS (VmHWM) %s, RSS now %s\n", peak, now)
	for k, v := range errs {
		fmt.Printf("   error %d×: %s\n", v, k)
	}
	fmt.Println()
}
