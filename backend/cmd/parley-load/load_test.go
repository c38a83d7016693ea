package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/llm/fakeopenai"
)

func TestEvents(t *testing.T) {
	t.Parallel()
	stream := "data: {\"type\":\"token\",\"value\":\"Hi\"}\n\n: comment\ndata: {\"type\":\"done\"}\n\ndata: [DONE]"
	var types []string
	require.NoError(t, events(strings.NewReader(stream), func(d []byte) bool {
		types = append(types, eventType(d)+"|"+string(d))
		return true
	}))
	require.Equal(t, []string{`token|{"type":"token","value":"Hi"}`, `done|{"type":"done"}`, `|[DONE]`}, types)
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	r := &result{elapsed: 2 * time.Second}
	for i := 1; i <= 100; i++ {
		r.lats = append(r.lats, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, r.p(50))
	require.Equal(t, 99*time.Millisecond, r.p(99))
	require.Equal(t, 100*time.Millisecond, r.p(100))
	require.InDelta(t, 50, r.rps(), 0.001)
	require.Zero(t, (&result{}).p(50))
}

// The floor stores each request in one committed INSERT and refuses a body
// without its fields.
func TestFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := floorPool(ctx, dbtest.New(t), 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	srv := httptest.NewServer(floorHandler(pool))
	t.Cleanup(srv.Close)
	for _, body := range []string{`{"query":"a","conversationId":"c1"}`, `{"query":"b","conversationId":"c2"}`} {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"query":"a"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM load_floor WHERE query IN ('a', 'b')").Scan(&n))
	require.Equal(t, 2, n)
}

// The floor proxy stores the turn, then relays the fake model's answer; a
// body without its fields reaches neither.
func TestFloorProxy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := floorPool(ctx, dbtest.New(t), 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	model := &fakeopenai.Model{Tokens: []string{"Hello", " there."}}
	modelSrv := httptest.NewServer(model)
	t.Cleanup(modelSrv.Close)
	srv := httptest.NewServer(floorProxyHandler(pool, http.DefaultClient, modelSrv.URL, false))
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"query":"p","conversationId":"c9"}`))
	require.NoError(t, err)
	var got struct{ Answer string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "Hello there.", got.Answer)
	resp, err = http.Post(srv.URL, "application/json", strings.NewReader(`{"conversationId":"c9"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM load_floor WHERE query = 'p'").Scan(&n))
	require.Equal(t, 1, n)
	// A model that fails is a 502, not an answer.
	modelSrv.Close()
	resp, err = http.Post(srv.URL, "application/json", strings.NewReader(`{"query":"q","conversationId":"c10"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
}

// cpu reads a process's CPU from /proc (here the test's own, made to spin
// for a while) and Postgres's, which runs on this machine for the tests.
func TestCPU(t *testing.T) {
	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	e := &env{parley: &exec.Cmd{Process: self}}
	before := e.cpu()
	require.Positive(t, before.postgres, "Postgres's processes are found")
	// Spin until /proc says 100 ms of CPU went by (however busy the
	// machine is), or fail after 20 s of wall time.
	var after cpuTimes
	x := 0
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
		for range 1_000_000 {
			x++
		}
		if after = e.cpu(); after.parley-before.parley >= 100*time.Millisecond {
			break
		}
	}
	require.Positive(t, x)
	require.GreaterOrEqual(t, after.parley-before.parley, 100*time.Millisecond, "the spin is counted")
	p, _ := perRequest(before, after, 10)
	require.Equal(t, (after.parley-before.parley)/10, p)
}

// The promises floor stores the question, asks the model, stores the
// answer, then replies: both rows are there when the reply comes.
func TestPromisesFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := floorPool(ctx, dbtest.New(t), 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	modelSrv := httptest.NewServer(&fakeopenai.Model{Tokens: []string{"Stored", " too."}})
	t.Cleanup(modelSrv.Close)
	srv := httptest.NewServer(floorProxyHandler(pool, http.DefaultClient, modelSrv.URL, true))
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"query":"kept","conversationId":"p1"}`))
	require.NoError(t, err)
	var got struct{ Answer string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "Stored too.", got.Answer)
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM load_floor WHERE query IN ('kept', 'Stored too.')").Scan(&n))
	require.Equal(t, 2, n, "the question and the answer")
}
