package server

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// A client that stops reading a stream: its writes fail once the deadline
// passes, and the handler ends, rather than blocking as long as the client
// stays connected; the flusher connect asks of a stream is still there.
func TestWriteDeadlinesEndAStreamNobodyReads(t *testing.T) {
	t.Parallel()
	ended := make(chan error, 1)
	srv := httptest.NewServer(writeDeadlines(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			ended <- errors.New("no http.Flusher")
			return
		}
		chunk := []byte(strings.Repeat("token ", 10_000))
		for {
			if _, err := w.Write(chunk); err != nil {
				ended <- err
				return
			}
			f.Flush()
		}
	}), 300*time.Millisecond))
	defer srv.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the handler ended with %v, want a write past its deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stream nobody reads still blocks its handler after 10 s")
	}
}
