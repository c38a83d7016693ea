package server_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/testenv/syncbuf"
)

// A Connect call that connect-go refuses before Parley's interceptors run
// is logged with its real status, its code and its procedure: a stream's
// error (an unknown compression, a malformed Connect-Timeout-Ms) travels in
// its end-of-stream message behind a 200, and was logged and counted as a
// success; a unary call over the size limit (a gzip bomb) was logged
// without its code; both under the service's route.
func TestRPCRefusedBeforeInterceptorsIsLogged(t *testing.T) {
	// Not parallel: the default logger is the process's.
	e := testenv.New(t)
	var buf syncbuf.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(server.LogHandler{Handler: slog.NewJSONHandler(&buf, nil)}))
	t.Cleanup(func() { slog.SetDefault(prev) })

	// logged sends req and returns its request log line.
	logged := func(req *http.Request) (int, map[string]any) {
		t.Helper()
		req.Header.Set("Authorization", "Bearer "+e.A.Key)
		req.Header.Set("X-Request-Id", "rpc-outcome-"+strings.ReplaceAll(t.Name(), "/", "-")+req.Header.Get("Test-Case"))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		for line := range strings.Lines(buf.String()) {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec))
			if rec["msg"] == "request" && rec["request_id"] == req.Header.Get("X-Request-Id") {
				return resp.StatusCode, rec
			}
		}
		t.Fatalf("no log line for %s", req.Header.Get("X-Request-Id"))
		return 0, nil
	}

	watch := e.URL + parleyv1connect.ConversationServiceWatchConversationProcedure
	for i, tc := range []struct {
		header, value string
		status        float64
		code          string
	}{
		{"Connect-Content-Encoding", "br", 501, "unimplemented"},
		{"Connect-Timeout-Ms", "soon", 400, "invalid_argument"},
	} {
		req, err := http.NewRequest("POST", watch, bytes.NewReader(make([]byte, 5)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/connect+proto")
		req.Header.Set(tc.header, tc.value)
		req.Header.Set("Test-Case", string(rune('a'+i)))
		status, rec := logged(req)
		require.Equal(t, http.StatusOK, status, "a Connect stream's error travels behind a 200")
		require.Equal(t, tc.status, rec["status"], "%s: %v", tc.header, rec)
		require.Equal(t, 200.0, rec["http_status"], "%v", rec)
		require.Equal(t, tc.code, rec["code"], "%v", rec)
		require.Equal(t, parleyv1connect.ConversationServiceWatchConversationProcedure, rec["route"], "%v", rec)
	}

	// A unary call whose message inflates past 1 MiB.
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	_, err := zw.Write(make([]byte, 8<<20))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	req, err := http.NewRequest("POST", e.URL+parleyv1connect.AgentServiceListAgentsProcedure, &bomb)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Content-Encoding", "gzip")
	status, rec := logged(req)
	require.Equal(t, http.StatusTooManyRequests, status, "resource_exhausted")
	require.Equal(t, 429.0, rec["status"], "%v", rec)
	require.Equal(t, "resource_exhausted", rec["code"], "%v", rec)
	require.Equal(t, parleyv1connect.AgentServiceListAgentsProcedure, rec["route"], "%v", rec)
}
