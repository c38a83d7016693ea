// Command parley-load is `make load`: it starts Parley (bin/parley serve) on a
// database of its own, a fake OpenAI-compatible model and the "floor" (the
// least a persisting service does per turn: decode JSON, one committed
// INSERT, answer), drives them, and prints latency percentiles and
// throughput for JSON chat (closed and open loop), SSE time to first token,
// and held concurrent streams (worst gap between tokens, Parley's peak RSS).
// See docs/benchmarks.md for figures and how to read them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	parley     string
	adminURL   string
	dbName     string
	keep       bool
	clients    int
	duration   time.Duration
	warmup     time.Duration
	rate       int
	ttftConc   int
	held       []int
	hold       time.Duration
	gap        time.Duration
	floorConns int
}

func main() {
	var c config
	var held string
	flag.StringVar(&c.parley, "parley", "bin/parley", "the parley binary to run (make build)")
	flag.StringVar(&c.adminURL, "database-url", envOr("PARLEY_LOAD_DATABASE_URL", "postgres://parley:parley@127.0.0.1:5432/parley?sslmode=disable"),
		"a Postgres URL whose role may create databases; the run uses a database of its own beside it, never this one (PARLEY_LOAD_DATABASE_URL)")
	flag.StringVar(&c.dbName, "db", "parley_load", "the run's own database, dropped and made again at the start")
	flag.BoolVar(&c.keep, "keep", false, "keep the run's database (default: dropped at the end)")
	flag.IntVar(&c.clients, "clients", 32, "closed loop: concurrent clients")
	flag.DurationVar(&c.duration, "duration", 5*time.Second, "how long each closed- and open-loop phase runs")
	flag.DurationVar(&c.warmup, "warmup", time.Second, "closed loop: how long each phase runs before it is measured (its requests are not counted)")
	flag.IntVar(&c.rate, "rate", 200, "open loop: requests per second")
	flag.IntVar(&c.ttftConc, "ttft-streams", 50, "time to first token: concurrent streaming clients")
	flag.StringVar(&held, "held", "2000,5000", "held concurrent streams: the counts, comma-separated (empty: none)")
	flag.DurationVar(&c.hold, "hold", 8*time.Second, "held streams: how long each answer drips")
	flag.DurationVar(&c.gap, "gap", 100*time.Millisecond, "held streams: the fake model's gap between tokens")
	flag.IntVar(&c.floorConns, "floor-conns", 32, "the floor's Postgres pool size")
	flag.Parse()
	for _, s := range strings.Split(held, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "parley-load: --held %q: give positive counts, comma-separated\n", held)
			os.Exit(2)
		}
		c.held = append(c.held, n)
	}
	if c.clients <= 0 || c.rate <= 0 || c.ttftConc <= 0 || c.duration <= 0 || c.warmup < 0 || c.gap <= 0 || c.hold < c.gap {
		fmt.Fprintln(os.Stderr, "parley-load: --clients, --rate, --ttft-streams, --duration and --gap must be positive, --hold at least --gap")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "parley-load:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, c config) error {
	start := time.Now()
	env, err := setUp(ctx, c)
	if err != nil {
		return err
	}
	defer env.close()
	fmt.Printf("parley-load: Parley pid %d at %s (log %s/parley.log), fake model at %s, floor at %s (set up in %s)\n\n",
		env.parley.Process.Pid, env.parleyURL, env.tmp, env.modelURL, env.floorURL, time.Since(start).Round(100*time.Millisecond))

	fast := env.fast
	env.model.Store(fast)
	r := &runner{env: env, cfg: c}
	primed, err := r.prime(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("parley-load: primed with %d turns, then ANALYZE, in %s: the phases measure a database with statistics\n\n", primeTurns, primed.Round(100*time.Millisecond))
	fmt.Printf("== JSON chat, closed loop, %d clients, %s each ==\n", c.clients, c.duration)
	header()
	direct := r.closed(ctx, "model direct", c.clients, r.modelJSON)
	cpu0 := env.cpu()
	floor := r.closed(ctx, "floor (INSERT)", c.clients, r.floor)
	cpu1 := env.cpu()
	parley := r.closed(ctx, "parley", c.clients, r.parleyJSON)
	cpu2 := env.cpu()
	fmt.Printf("   parley/floor throughput: %.2f×; parley/model-direct: %.2f×\n", parley.rps()/floor.rps(), parley.rps()/direct.rps())
	_, floorPG := perRequest(cpu0, cpu1, floor.made)
	turnParley, turnPG := perRequest(cpu1, cpu2, parley.made)
	fmt.Printf("   CPU a request (from /proc, steadier than the rates): parley %s + its Postgres %s; the floor's Postgres %s\n",
		ms(turnParley), ms(turnPG), ms(floorPG))
	fmt.Printf("   sockets in TIME_WAIT on the model's port after the phases: %d (connections not kept for reuse)\n\n", env.timeWait())

	fmt.Printf("== JSON chat, open loop, %d req/s, %s each (latency from each request's scheduled start) ==\n", c.rate, c.duration)
	header()
	od := r.open(ctx, "model direct", c.rate, r.modelJSON)
	of := r.open(ctx, "floor proxy", c.rate, r.floorProxy)
	oa := r.open(ctx, "promises floor", c.rate, r.promises)
	op := r.open(ctx, "parley", c.rate, r.parleyJSON)
	fmt.Printf("   added by the floor proxy (its INSERT, then the model): p50 %s  p95 %s  p99 %s\n", ms(of.p(50)-od.p(50)), ms(of.p(95)-od.p(95)), ms(of.p(99)-od.p(99)))
	fmt.Printf("   added by the promises floor (and the answer's INSERT before the reply): p50 %s  p95 %s  p99 %s\n", ms(oa.p(50)-od.p(50)), ms(oa.p(95)-od.p(95)), ms(oa.p(99)-od.p(99)))
	fmt.Printf("   added by parley: p50 %s  p95 %s  p99 %s\n\n", ms(op.p(50)-od.p(50)), ms(op.p(95)-od.p(95)), ms(op.p(99)-od.p(99)))

	fmt.Printf("== SSE time to first token, %d streaming clients, %s each ==\n", c.ttftConc, c.duration)
	header()
	td := r.closed(ctx, "model direct", c.ttftConc, r.modelTTFT)
	tp := r.closed(ctx, "parley", c.ttftConc, r.parleyTTFT)
	fmt.Printf("   added by parley: p50 %s  p95 %s  p99 %s\n\n", ms(tp.p(50)-td.p(50)), ms(tp.p(95)-td.p(95)), ms(tp.p(99)-td.p(99)))

	for _, n := range c.held {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.held(ctx, n)
	}
	fmt.Printf("parley-load: done in %s\n", time.Since(start).Round(time.Second))
	return ctx.Err()
}
