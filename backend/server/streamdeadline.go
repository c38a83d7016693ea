package server

import (
	"net/http"
	"time"
)

// streamWriteTimeout is how long one write of a streaming RPC may wait for
// its client, as an SSE route's may (compat/sse.go).
const streamWriteTimeout = 10 * time.Second

// writeDeadlines gives every write of the handler's responses a deadline of
// timeout (renewed at most once a second, so a write gets timeout less up
// to a second). It wraps the streaming RPCs (ChatStream,
// WatchConversation) over Connect, gRPC and gRPC-Web: connect's Send heeds
// no context, so a client that stopped reading held its turn, its slot and,
// at shutdown, the drain, for as long as it stayed connected; the server
// sets no WriteTimeout, which would cut every long stream.
func writeDeadlines(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout}, r)
	})
}

// deadlineWriter renews its connection's write deadline before each write
// and flush.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	set     time.Time
}

func (d *deadlineWriter) renew() {
	now := time.Now()
	if now.Sub(d.set) < time.Second {
		return
	}
	d.set = now
	_ = d.rc.SetWriteDeadline(now.Add(d.timeout)) // a writer without deadlines (a test's recorder) gets none
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.renew()
	return d.ResponseWriter.Write(b)
}

// Flush implements http.Flusher, which connect asks of a streaming
// response.
func (d *deadlineWriter) Flush() {
	d.renew()
	_ = d.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
