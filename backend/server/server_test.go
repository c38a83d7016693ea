package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/dbtest"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

func withRedis(prefix string) testenv.Option {
	return func(c *server.Config) {
		c.RedisURL = dbtest.RedisURL()
		c.RedisPrefix = prefix
	}
}

// restBurst sends n concurrent GET /api/agents spread over the instances and
// returns the statuses.
func restBurst(t *testing.T, n int, key string, envs ...*testenv.Env) map[int]int {
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := envs[i%len(envs)].Do("GET", "/api/agents", key, nil)
			mu.Lock()
			counts[r.Status]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return counts
}

func TestRateLimitOverREST(t *testing.T) {
	t.Parallel()
	t.Run("one instance", func(t *testing.T) {
		t.Parallel()
		e := testenv.New(t)
		free := e.Bootstrap("Free", "free")
		got := restBurst(t, 14, free.Key, e)
		require.Equal(t, map[int]int{200: 10, 429: 4}, got)

		r := e.Do("GET", "/api/agents", free.Key, nil)
		require.Equal(t, http.StatusTooManyRequests, r.Status)
		eb := r.Err(t)
		require.Equal(t, "RATE_LIMIT_EXCEEDED", eb.Error.Code)
		require.NotNil(t, eb.Error.RetryAfter)
		// A minute's window, told to the second and rounded up so that it
		// is over when the caller comes back (ratelimit.Result.RetryAfter).
		require.True(t, *eb.Error.RetryAfter >= 1 && *eb.Error.RetryAfter <= 61, "retryAfter %d", *eb.Error.RetryAfter)
		require.Equal(t, strconv.FormatInt(*eb.Error.RetryAfter, 10), r.Header.Get("Retry-After"))
		require.Equal(t, "10", r.Header.Get("X-RateLimit-Limit"))
		require.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))
		reset, err := strconv.ParseInt(r.Header.Get("X-RateLimit-Reset"), 10, 64)
		require.NoError(t, err)
		require.InDelta(t, time.Now().Unix()+30, reset, 31)

		// Another key of another organization is not affected.
		require.Equal(t, http.StatusOK, e.Do("GET", "/api/agents", e.A.Key, nil).Status)
	})
	t.Run("two instances sharing redis", func(t *testing.T) {
		t.Parallel()
		var b [6]byte
		_, _ = rand.Read(b[:])
		prefix := "parley-test:" + hex.EncodeToString(b[:])
		one := testenv.New(t, withRedis(prefix))
		two := testenv.NewOn(t, one.DBURL, withRedis(prefix))
		free := one.Bootstrap("Free", "free")
		got := restBurst(t, 16, free.Key, one, two)
		require.Equal(t, map[int]int{200: 10, 429: 6}, got)
	})
}

func TestRateLimitOverConnect(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	free := e.Bootstrap("Free", "free")
	c := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(free.Key)))
	ctx := context.Background()
	for range 10 {
		_, err := c.ListAgents(ctx, &parleyv1.ListAgentsRequest{})
		require.NoError(t, err)
	}
	_, err := c.ListAgents(ctx, &parleyv1.ListAgentsRequest{})
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err))
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	var retry *errdetails.RetryInfo
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if ri, ok := v.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	require.NotNil(t, retry, "ResourceExhausted carries a RetryInfo detail")
	require.True(t, retry.GetRetryDelay().AsDuration() >= time.Second)
	require.NotEmpty(t, ce.Meta().Get("Retry-After"))
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		r := e.Do("GET", path, "", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", path, r.Body)
	}
	r := e.Do("GET", "/no/such/route", "", nil)
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, "NOT_FOUND", r.Err(t).Error.Code)
	require.NotEmpty(t, r.Header.Get("X-Request-Id"))

	// A route asked with a method it does not take is 405 naming those it
	// does, not 404 (which a client reads as "no such agent").
	agent := "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/api/v2/agent/" + agent + "/chat", "POST"},
		{"PATCH", "/api/agents/" + agent, "GET, PUT, DELETE"},
		{"DELETE", "/v2/agent/" + agent + "/conversations", "GET"},
	} {
		r = e.Do(c.method, c.path, e.A.Key, nil)
		require.Equal(t, http.StatusMethodNotAllowed, r.Status, "%s %s: %s", c.method, c.path, r.Body)
		require.Equal(t, "METHOD_NOT_ALLOWED", r.Err(t).Error.Code)
		require.Equal(t, c.allow, r.Header.Get("Allow"), "%s %s", c.method, c.path)
	}
}

func TestReadinessWaitsForMigrations(t *testing.T) {
	t.Parallel()
	// A database with no schema: the instance starts (told not to migrate)
	// but is not ready.
	empty := dbtest.NewEmpty(t)
	app, err := server.New(context.Background(), server.Config{DatabaseURL: empty, Migrate: false})
	require.NoError(t, err)
	defer app.Close()
	rec := httpRecorder(t, app.Handler(), "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, rec.StatusCode)
	body, _ := io.ReadAll(rec.Body)
	require.Contains(t, string(body), "migrations pending")

	// The gRPC health service says so too (a Kubernetes grpc probe, a
	// client's health checking), and SERVING once migrated: it said
	// SERVING whatever the instance's state.
	srv := httptest.NewUnstartedServer(app.Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	health := healthpb.NewHealthClient(testenv.GRPC(t, srv.URL))
	ctx := context.Background()
	for _, service := range []string{"", parleyv1connect.ChatServiceName} {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, resp.GetStatus(), "service %q", service)
	}
	_, err = health.Check(ctx, &healthpb.HealthCheckRequest{Service: "parley.v1.Nope"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = db.Migrate(ctx, empty)
	require.NoError(t, err)
	resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: parleyv1connect.ChatServiceName})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
}

// An instance started with --migrate=false before `parley migrate` (not
// ready meanwhile) runs its jobs once the migrations are applied. Its River
// client failed to start on the missing job tables, and the instance, ready
// once migrated, ran no job until restarted.
func TestJobsWaitForMigrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty := dbtest.NewEmpty(t)
	app, err := server.New(ctx, server.Config{DatabaseURL: empty, Migrate: false, Workers: 1, ShutdownTimeout: 5 * time.Second, LastUsedFlush: time.Hour})
	require.NoError(t, err)
	defer app.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Serve(sctx, ln) }()
	rec := httpRecorder(t, app.Handler(), "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, rec.StatusCode)

	_, err = db.Migrate(ctx, empty)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, empty)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// A running River producer records its queues.
	require.Eventually(t, func() bool {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM river_queue").Scan(&n)
		return err == nil && n > 0
	}, time.Minute, 100*time.Millisecond, "the instance's jobs never started")
	cancel()
	require.NoError(t, <-done)
}

func httpRecorder(t *testing.T, h http.Handler, path string) *http.Response {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	resp, err := http.Get("http://" + ln.Addr().String() + path)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	u := dbtest.New(t)
	app, err := server.New(context.Background(), server.Config{DatabaseURL: u, Migrate: true, ShutdownTimeout: 5 * time.Second, LastUsedFlush: time.Hour})
	require.NoError(t, err)
	defer app.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 5*time.Second, 20*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(6 * time.Second):
		t.Fatal("Serve did not return after shutdown")
	}
	_, err = http.Get(base + "/healthz")
	require.Error(t, err, "the server still answers after shutdown")
}

// Anyone may ask /readyz, and while migrations are pending each answer
// reads their state on a connection of its own, outside the pool: a flood
// of them must not open a connection each at once (the database's limit
// is every instance's).
func TestReadinessFloodOpensFewConnections(t *testing.T) {
	t.Parallel()
	empty := dbtest.NewEmpty(t)
	app, err := server.New(context.Background(), server.Config{DatabaseURL: empty, Migrate: false, DBMaxConns: 2})
	require.NoError(t, err)
	defer app.Close()
	ts := httptest.NewServer(app.Handler())
	defer ts.Close()
	name := empty[strings.LastIndex(empty, "/")+1:]
	if i := strings.Index(name, "?"); i >= 0 {
		name = name[:i]
	}
	admin, err := pgx.Connect(context.Background(), dbtest.AdminURL())
	require.NoError(t, err)
	defer admin.Close(context.Background())

	done := make(chan struct{})
	peak := make(chan int, 1)
	go func() {
		most := 0
		for {
			select {
			case <-done:
				peak <- most
				return
			default:
			}
			var n int
			if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name).Scan(&n); err == nil {
				most = max(most, n)
			}
		}
	}()
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 8 {
				resp, err := client.Get(ts.URL + "/readyz")
				if err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	// The pool's 2, one reading the migration state, and the few before
	// it, whose backends take a moment to leave pg_stat_activity (6 once,
	// under the race detector on a busy machine). Without the one-check
	// bound, the 24 clients' checks had 12 open at once.
	require.LessOrEqual(t, <-peak, 8)
}
