package compat

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/parleyhq/parley/compat/wire"
)

// SSE timing: a comment line keeps idle connections (and proxies) alive;
// each write must finish within eventWriteTimeout or the stream is dropped.
const (
	heartbeatEvery    = 15 * time.Second
	eventWriteTimeout = 10 * time.Second
)

// sseStream writes Server-Sent Events, flushing each one through
// http.ResponseController (which unwraps middleware writers). Headers go out
// with the first event, so a request that fails before any can still get an
// ordinary error status.
type sseStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	mu      sync.Mutex
	started bool
	stop    chan struct{}
	stopped sync.Once
}

func newSSE(w http.ResponseWriter) *sseStream {
	return &sseStream{w: w, rc: http.NewResponseController(w), stop: make(chan struct{})}
}

func (s *sseStream) startLocked() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	go s.heartbeat()
}

func (s *sseStream) heartbeat() {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			_ = s.writeLocked([]byte(": keep-alive\n\n"))
			s.mu.Unlock()
		}
	}
}

// Started reports whether anything was sent.
func (s *sseStream) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// Event sends one event; name may be empty (the default "message" event).
func (s *sseStream) Event(name string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
	return s.writeLocked(wire.Frame(name, data))
}

// EventWithID sends one event of the default type with an id, which the
// client sends back as Last-Event-ID when it reconnects.
func (s *sseStream) EventWithID(id string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
	return s.writeLocked(append([]byte("id: "+strings.NewReplacer("\r", "", "\n", "").Replace(id)+"\n"), wire.Frame("", data)...))
}

// Comment sends a comment line (clients ignore it); it starts the stream.
func (s *sseStream) Comment(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
	return s.writeLocked([]byte(": " + strings.NewReplacer("\r", " ", "\n", " ").Replace(text) + "\n\n"))
}

func (s *sseStream) writeLocked(b []byte) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout)) // unsupported writers: no deadline
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// Close stops the heartbeat.
func (s *sseStream) Close() {
	s.stopped.Do(func() { close(s.stop) })
}
