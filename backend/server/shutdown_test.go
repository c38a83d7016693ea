package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// On SIGTERM, requests and jobs in flight drain together within one grace:
// the workers take no new job, a job still running near the end is
// cancelled and left for River to retry (not running, for good, after a
// SIGKILL), and Serve returns within the grace, not after the requests'
// drain and then the jobs' own.
func TestShutdownDrainsRequestsAndJobsWithinOneGrace(t *testing.T) {
	t.Parallel()
	const grace = 4 * time.Second // turns and jobs are stopped at 2 s
	ctx := context.Background()

	// A page that never comes: its ingestion runs until cancelled.
	fetched := make(chan struct{})
	var once sync.Once
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(fetched) })
		<-r.Context().Done()
	}))
	t.Cleanup(site.Close)
	// A model that sends one token, then nothing until the turn ends.
	fake := testenv.NewFakeProvider(t)
	fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"Partial"}, StallAfter: 1}
	}

	dbURL := dbtest.New(t)
	cfg := server.Config{
		DatabaseURL: dbURL, ShutdownTimeout: grace, LastUsedFlush: time.Hour, Workers: 2,
		FetchAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	}
	testenv.WithFakeModels(fake)(&cfg)
	app, err := server.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(app.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, sigterm := context.WithCancel(ctx)
	defer sigterm()
	served := make(chan error, 1)
	go func() { served <- app.Serve(serveCtx, ln) }()
	base := "http://" + ln.Addr().String()
	_, key, err := account.Bootstrap(ctx, app.Store, "A", "pro")
	require.NoError(t, err)
	post := func(path, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	created := func(path, body string) string {
		t.Helper()
		resp := post(path, body)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", b)
		var v struct{ ID string }
		require.NoError(t, json.Unmarshal(b, &v))
		return v.ID
	}

	// A job in flight.
	store := created("/api/datastores", `{"name":"Site"}`)
	ds := created("/api/datastores/"+store+"/datasources", `{"type":"web_page","url":"`+site.URL+`/page"}`)
	select {
	case <-fetched:
	case <-time.After(20 * time.Second):
		t.Fatal("the ingestion did not start")
	}
	// A streamed chat turn in flight.
	agent := created("/api/agents", `{"name":"Support","instructions":"Help."}`)
	stream := post("/api/v2/agent/"+agent+"/chat", `{"query":"Hello","conversationId":"c1","streaming":true}`)
	defer stream.Body.Close()
	require.Equal(t, http.StatusOK, stream.StatusCode)
	events := bufio.NewReader(stream.Body)
	for {
		line, err := events.ReadString('\n')
		require.NoError(t, err)
		if strings.Contains(line, "Partial") {
			break
		}
	}

	start := time.Now()
	sigterm()
	// A job queued after the signal is left for another process.
	time.Sleep(200 * time.Millisecond)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	var late int64
	require.NoError(t, conn.QueryRow(ctx,
		`INSERT INTO river_job (kind, args, queue, state, max_attempts, priority) VALUES ('ingest_datasource', $1, 'default', 'available', 1, 1) RETURNING id`,
		map[string]any{"org_id": uuid.New(), "datasource_id": uuid.New()}).Scan(&late))

	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(3 * grace):
		t.Fatal("Serve did not return")
	}
	took := time.Since(start)
	require.Less(t, took, grace+time.Second, "shutdown took %s with a grace of %s", took, grace)

	// The turn ended with its final event, as before.
	rest, _ := io.ReadAll(events)
	require.Contains(t, string(rest), "SHUTTING_DOWN")

	// The job in flight is left for a retry, not running; the late one untouched.
	var state string
	var attempt int
	require.NoError(t, conn.QueryRow(ctx,
		`SELECT state::text, attempt FROM river_job WHERE kind = 'ingest_datasource' AND args->>'datasource_id' = $1`, ds).Scan(&state, &attempt))
	require.Contains(t, []string{"available", "retryable"}, state, "the cancelled job (attempt %d)", attempt)
	require.NoError(t, conn.QueryRow(ctx, `SELECT state::text, attempt FROM river_job WHERE id = $1`, late).Scan(&state, &attempt))
	require.Equal(t, "available", state)
	require.Zero(t, attempt, "a job was taken after the signal")
}

// A SIGTERM while the database does not answer (a stalled failover or
// network path) still ends Serve and Close within a few seconds of the
// grace: the last flush of the keys' last-use times waited out the
// database's 30 s bound, then closing the pool waited 15 s more (pgx's
// bound) for the connection that flush left, past compose's
// stop_grace_period and any orchestrator's, which then killed the process.
func TestShutdownWithTheDatabaseStalled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy := dbtest.NewProxy(t, dbtest.New(t))
	cfg := server.Config{DatabaseURL: proxy.URL, ShutdownTimeout: time.Second, LastUsedFlush: time.Hour}
	app, err := server.New(ctx, cfg)
	require.NoError(t, err)
	_, key, err := account.Bootstrap(ctx, app.Store, "A", "pro")
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, sigterm := context.WithCancel(ctx)
	defer sigterm()
	served := make(chan error, 1)
	go func() { served <- app.Serve(serveCtx, ln) }()

	// A request with the key: its last use waits for the flush.
	req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/api/agents", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	proxy.Stall()
	sigterm()
	stopped := make(chan error, 1)
	go func() {
		err := <-served
		app.Close()
		stopped <- err
	}()
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("Serve and Close still ran 15 s after the signal, with a grace of 1 s")
	}
}
