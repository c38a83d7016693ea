package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// A handler's panic is the API's 500 INTERNAL_ERROR with a request id, not
// a dropped connection; one after the response began, or a handler's own
// abort, still aborts the response.
func TestPanicIsAnInternalError(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/boom", func(http.ResponseWriter, *http.Request) { panic("boom") })
	mux.HandleFunc("/late", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte("half"))
		w.(http.Flusher).Flush()
		panic("late")
	})
	mux.HandleFunc("/abort", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte("half"))
		w.(http.Flusher).Flush()
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
