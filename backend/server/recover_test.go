package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/metrics"
	"github.com/parleyhq/parley/backend/testenv/syncbuf"
)

// sendHalf sends the status line and the first 4 of the 100 bytes a
// response says it has.
func sendHalf(w http.ResponseWriter) {
	w.Header().Set("Content-Length", "100")
	_, _ = w.Write([]byte("half"))
	w.(http.Flusher).Flush()
}

// A handler's panic is the API's 500 INTERNAL_ERROR with a request id, not
// a dropped connection; one after the response began, or a handler's own
// abort, still aborts the response.
func TestPanicIsAnInternalError(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/boom", func(http.ResponseWriter, *http.Request) { panic("boom") })
	mux.HandleFunc("/late", func(w http.ResponseWriter, _ *http.Request) {
		sendHalf(w)
		panic("late")
	})
	mux.HandleFunc("/abort", func(w http.ResponseWriter, _ *http.Request) {
		sendHalf(w)
		panic(http.ErrAbortHandler)
	})
	srv := httptest.NewServer(requestLog(recoverPanics(mux)))
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/boom")
	require.NoError(t, err, "the connection was dropped")
	defer resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"))
	var body struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, "INTERNAL_ERROR", body.Error.Code)
	require.NotContains(t, body.Error.Message, "boom", "the panic's value is for the log")

	for _, path := range []string{"/late", "/abort"} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Error(t, err, "%s: a response cut short read as complete", path)
	}
}

// A response whose headers went out by a flush alone (an event stream's
// 200, before its first event) has begun: a panic then aborts it, rather
// than write a 500 after the 200 and an error body into the stream.
func TestPanicAfterAFlushAborts(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if err := http.NewResponseController(w).Flush(); err != nil {
			panic(err)
		}
		panic("mid-stream")
	})
	srv := httptest.NewServer(requestLog(recoverPanics(mux)))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/stream")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NotContains(t, string(body), "INTERNAL_ERROR", "an error body was written into a stream already begun")
	require.Error(t, err, "a stream cut by a panic read as complete")
}

// A response aborted after it began (a panic once the status went out, a
// download cut short by a failure: http.ErrAbortHandler) still has its
// request log line and its metric, as a failure: the panic went through
// requestLog, and the request was neither logged nor counted. Not parallel:
// the default logger is the process's.
func TestAbortedResponseIsLoggedAndCounted(t *testing.T) {
	var buf syncbuf.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(LogHandler{Handler: slog.NewJSONHandler(&buf, nil)}))
	t.Cleanup(func() { slog.SetDefault(prev) })

	mux := http.NewServeMux()
	mux.HandleFunc("GET /cut-short", func(w http.ResponseWriter, _ *http.Request) {
		sendHalf(w)
		panic(http.ErrAbortHandler)
	})
	srv := httptest.NewServer(requestLog(recoverPanics(mux)))
	t.Cleanup(srv.Close)

	req, err := http.NewRequest("GET", srv.URL+"/cut-short", nil)
	require.NoError(t, err)
	req.Header.Set("X-Request-Id", "aborted-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Error(t, err, "the response was not aborted")

	var rec map[string]any
	for line := range strings.Lines(buf.String()) {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		if r["msg"] == "request" && r["request_id"] == "aborted-1" {
			rec = r
		}
	}
	require.NotNil(t, rec, "the aborted request has no log line: %s", buf.String())
	require.Equal(t, 500.0, rec["status"], "%v", rec)
	require.Equal(t, 200.0, rec["http_status"], "%v", rec)
	require.Equal(t, "GET /cut-short", rec["route"], "%v", rec)

	h, err := metrics.Handler()
	require.NoError(t, err)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	require.Contains(t, w.Body.String(), `parley_request_duration_seconds_count{route="GET /cut-short",status_class="5xx"} 1`,
		"the aborted request is not counted as a failure")
}
