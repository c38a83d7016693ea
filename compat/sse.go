package compat

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/parleyhq/parley/backend/writeguard"
	"github.com/parleyhq/parley/compat/wire"
)

// SSE timing: a comment line keeps idle connections (and proxies) alive;
// each write must finish within eventWriteTimeout or the stream is dropped.
// A chat stream whose first event has not come within chatStreamStart starts
// anyway (headers and a comment), so that a client and the proxies between
// see bytes while the model is awaited; a turn that fails sooner (a bad
// attachment, a provider that refuses) still answers with its error status.
const (
	heartbeatEvery    = 15 * time.Second
	eventWriteTimeout = 10 * time.Second
	chatStreamStart   = time.Second
)

// tokenFlushEvery is how often a stream's token events are flushed at most
// while they come (issue 13: a flush is a write system call, and flushing
// each of thousands of streams' every token cost 14 % of the CPU). Tokens
// come every few milliseconds at most from a fast model; 5 ms is below
// anything a reader sees, and a token written in between waits for the
// flush that ends the interval, never longer. The first token, and every
// other event (sources, tool calls, done, errors, comments), is flushed at
// once: time to first token does not wait for it.
const tokenFlushEvery = 5 * time.Millisecond

var (
	noLineEnds     = strings.NewReplacer("\r", "", "\n", "")
	lineEndsSpaced = strings.NewReplacer("\r", " ", "\n", " ")
)

// sseStream writes Server-Sent Events, flushing them through
// http.ResponseController (which unwraps middleware writers): each event at
// once, except tokens after the first, coalesced (Token). Headers go out
// with the first event (or at StartAfter's time), so a request that fails
// before can still get an ordinary error status.
type sseStream struct {
	w       http.ResponseWriter
	mu      sync.Mutex
	started bool
	// evented: an event (not a comment) went out.
	evented bool
	// closed: the handler is done with w; nothing may be written.
	closed  bool
	timer   *time.Timer
	stop    chan struct{}
	stopped sync.Once

	// Token coalescing: when the last flush was, whether written bytes wait
	// for the next (flushTimer is then set to do it), whether a token went
	// out yet, and a failed deferred flush, reported by the next write.
	flushEvery time.Duration
	lastFlush  time.Time
	pending    bool
	flushTimer *time.Timer
	tokened    bool
	flushErr   error
	// guard bounds each write and flush at eventWriteTimeout, and nothing
	// between them (a deadline moved at each write reset an HTTP/2 stream
	// quiet for longer, between heartbeats).
	guard *writeguard.Guard
}

func newSSE(w http.ResponseWriter) *sseStream {
	return &sseStream{w: w, stop: make(chan struct{}), flushEvery: tokenFlushEvery,
		guard: writeguard.New(w, eventWriteTimeout)}
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
			if !s.closed {
				_ = s.writeLocked([]byte(": keep-alive\n\n"))
			}
			s.mu.Unlock()
		}
	}
}

// StartAfter starts the stream (status 200, headers and a comment) after d
// unless something was sent by then; the heartbeat follows.
func (s *sseStream) StartAfter(d time.Duration, comment string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || s.started {
			return
		}
		s.startLocked()
		_ = s.writeLocked([]byte(": " + comment + "\n\n"))
	})
}

// Started reports whether anything was sent.
func (s *sseStream) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// Unstarted reports whether nothing was sent; if so, the stream is closed
// and the caller may answer on the ResponseWriter itself.
func (s *sseStream) Unstarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return false
	}
	s.closed = true
	return true
}

// Evented reports whether an event went out (comments do not count).
func (s *sseStream) Evented() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evented
}

// Fail ends a stream with frames: as the whole reply, with status and
// header, when nothing was sent yet; after what was sent otherwise (the
// status is then 200, already gone).
func (s *sseStream) Fail(status int, header http.Header, frames []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if !s.started {
		s.started = true
		h := s.w.Header()
		for k, v := range header {
			h[k] = v
		}
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		s.w.WriteHeader(status)
	}
	s.evented = true
	_ = s.writeLocked(frames)
}

// Event sends one event; name may be empty (the default "message" event).
func (s *sseStream) Event(name string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
	s.evented = true
	return s.writeLocked(wire.Frame(name, data))
}

// Token sends one token event: the first at once, later ones coalesced,
// flushed at most tokenFlushEvery after they were written (tokenFlushEvery).
func (s *sseStream) Token(name string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
	s.evented = true
	if !s.tokened {
		s.tokened = true
		return s.writeLocked(wire.Frame(name, data))
	}
	return s.writeCoalescedLocked(wire.Frame(name, data))
}

// EventWithID sends one event of the default type with an id, which the
// client sends back as Last-Event-ID when it reconnects.
func (s *sseStream) EventWithID(id string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
	s.evented = true
	return s.writeLocked(append([]byte("id: "+noLineEnds.Replace(id)+"\n"), wire.Frame("", data)...))
}

// Comment sends a comment line (clients ignore it); it starts the stream.
func (s *sseStream) Comment(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
	return s.writeLocked([]byte(": " + lineEndsSpaced.Replace(text) + "\n\n"))
}

// Mark sends a comment line with an id and no data: clients fire no event
// for it (SSE: a block without data dispatches nothing) but keep id as the
// last event id, which EventSource sends back as Last-Event-ID when it
// reconnects. It starts the stream.
func (s *sseStream) Mark(text, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
	return s.writeLocked([]byte(": " + lineEndsSpaced.Replace(text) + "\nid: " + noLineEnds.Replace(id) + "\n\n"))
}

// writeLocked writes b and flushes it, with whatever waited.
func (s *sseStream) writeLocked(b []byte) error {
	if s.flushErr != nil {
		return s.flushErr
	}
	if _, err := s.guard.Write(s.w, b); err != nil {
		return err
	}
	return s.flushLocked()
}

// writeCoalescedLocked writes b, and flushes it at once if the last flush
// is tokenFlushEvery old, else when that interval ends.
func (s *sseStream) writeCoalescedLocked(b []byte) error {
	if s.flushErr != nil {
		return s.flushErr
	}
	wait := s.flushEvery - time.Since(s.lastFlush)
	if wait <= 0 {
		return s.writeLocked(b)
	}
	if _, err := s.guard.Write(s.w, b); err != nil {
		return err
	}
	s.pending = true
	if s.flushTimer == nil {
		s.flushTimer = time.AfterFunc(wait, s.flushPending)
	}
	return nil
}

// flushPending flushes what waits, at the end of a coalescing interval.
func (s *sseStream) flushPending() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushTimer = nil
	if s.closed || !s.pending {
		return
	}
	s.flushErr = s.flushLocked()
}

func (s *sseStream) flushLocked() error {
	s.pending = false
	s.lastFlush = time.Now()
	if s.flushTimer != nil {
		s.flushTimer.Stop()
		s.flushTimer = nil
	}
	return s.guard.Flush()
}

// Close flushes what waits, stops the heartbeat and the timers; nothing is
// written after it (the handler may return).
func (s *sseStream) Close() {
	s.mu.Lock()
	if s.pending && !s.closed && s.flushErr == nil {
		_ = s.flushLocked()
	}
	if s.flushTimer != nil {
		s.flushTimer.Stop()
		s.flushTimer = nil
	}
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.guard.Stop()
	s.mu.Unlock()
	s.stopped.Do(func() { close(s.stop) })
}
