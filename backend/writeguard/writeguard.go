// Package writeguard bounds how long a streaming response's writes may wait
// for their client, without bounding the silences between them.
//
// http.ResponseController.SetWriteDeadline alone does not: over HTTP/2 a
// deadline that passes resets the stream whether or not a write is waiting,
// so a deadline moved forward at each write cut every stream quiet for
// longer than it (an SSE heartbeat 15 s apart, a model thinking, a watched
// conversation where nothing happens). A Guard arms a deadline only while a
// write or a flush is under way: a timer, reset before and stopped after
// each, that moves the deadline to now when it fires, failing the write
// that waited too long.
package writeguard

import (
	"net/http"
	"sync"
	"time"
)

// Guard bounds the writes of one response. It is not safe for concurrent
// use (a response's writes are not either).
type Guard struct {
	rc      *http.ResponseController
	timeout time.Duration

	// mu orders expire against disarm: a timer that fires as its write
	// returns runs expire on its own goroutine, possibly after disarm (Stop
	// cannot take back a func that has started), and moved the deadline to
	// now then, cutting the silence that followed (an HTTP/2 stream is
	// reset at once) or failing the next write however fast. expire acts
	// only while the write that armed it (gen) is still under way.
	mu    sync.Mutex
	timer *time.Timer
	gen   uint64
}

// New guards w's writes and flushes with timeout each. A writer without
// deadlines (a test's recorder) is written unguarded.
func New(w http.ResponseWriter, timeout time.Duration) *Guard {
	return &Guard{rc: http.NewResponseController(w), timeout: timeout}
}

func (g *Guard) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	gen := g.gen
	g.timer = time.AfterFunc(g.timeout, func() { g.expire(gen) })
}

func (g *Guard) disarm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	g.timer.Stop()
}

// expire fails the write under way, if it is still the one that armed the
// timer (gen): its deadline is now.
func (g *Guard) expire(gen uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gen == g.gen {
		_ = g.rc.SetWriteDeadline(time.Now())
	}
}

// Write writes b to w (the response g guards, or a writer wrapping it).
func (g *Guard) Write(w http.ResponseWriter, b []byte) (int, error) {
	g.arm()
	defer g.disarm()
	return w.Write(b)
}

// Flush flushes the response.
func (g *Guard) Flush() error {
	g.arm()
	defer g.disarm()
	return g.rc.Flush()
}

// Stop releases the timer; the guard may still be used.
func (g *Guard) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	if g.timer != nil {
		g.timer.Stop()
	}
}
