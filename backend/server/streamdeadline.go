package server

import (
	"net/http"
	"time"

	"github.com/parleyhq/parley/backend/writeguard"
)

// streamWriteTimeout is how long one write of a streaming RPC may wait for
// its client, as an SSE route's may (compat/sse.go).
const streamWriteTimeout = 10 * time.Second

// writeDeadlines bounds every write and flush of the handler's responses at
// timeout (writeguard: the silences between them stay unbounded). It wraps
// the streaming RPCs (ChatStream, WatchConversation) over Connect, gRPC and
// gRPC-Web: connect's Send heeds no context, so a client that stopped
// reading held its turn, its slot and, at shutdown, the drain, for as long
// as it stayed connected; the server sets no WriteTimeout, which would cut
// every long stream.
func writeDeadlines(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := &deadlineWriter{ResponseWriter: w, guard: writeguard.New(w, timeout)}
		defer d.guard.Stop()
		next.ServeHTTP(d, r)
	})
}

// deadlineWriter writes and flushes through its guard.
type deadlineWriter struct {
	http.ResponseWriter
	guard *writeguard.Guard
}

func (d *deadlineWriter) Write(b []byte) (int, error) { return d.guard.Write(d.ResponseWriter, b) }

// Flush implements http.Flusher, which connect asks of a streaming
// response.
func (d *deadlineWriter) Flush() { _ = d.guard.Flush() }

// Unwrap lets http.ResponseController reach the connection's writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
