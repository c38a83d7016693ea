package compat

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// flushCounter is a ResponseWriter that counts its flushes and keeps what
// was flushed.
type flushCounter struct {
	*httptest.ResponseRecorder
	mu      sync.Mutex
	flushes int
	flushed string
}

func (f *flushCounter) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushes++
	f.flushed = f.Body.String()
}

func (f *flushCounter) state() (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushes, f.flushed
}

// The first token is flushed at once; later tokens wait for the end of the
// interval (here an hour, so nothing but the next event flushes them);
// every other event and the heartbeat's comments flush at once, with what
// waited.
func TestTokenFlushPolicy(t *testing.T) {
	w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	s := newSSE(w)
	s.flushEvery = time.Hour
	defer s.Close()

	require.NoError(t, s.Token("", []byte("one")))
	n, flushed := w.state()
	require.Equal(t, 1, n, "the first token is flushed at once")
	require.Equal(t, "data: one\n\n", flushed)

	require.NoError(t, s.Token("", []byte("two")))
	require.NoError(t, s.Token("", []byte("three")))
	n, _ = w.state()
	require.Equal(t, 1, n, "later tokens wait for the interval's flush")

	require.NoError(t, s.Event("", []byte("done")))
	n, flushed = w.state()
	require.Equal(t, 2, n, "any other event flushes at once, with the tokens before it")
	require.Equal(t, "data: one\n\ndata: two\n\ndata: three\n\ndata: done\n\n", flushed)

	require.NoError(t, s.Token("", []byte("four")))
	require.NoError(t, s.Comment("keep-alive"))
	n, flushed = w.state()
	require.Equal(t, 3, n, "a comment flushes at once too")
	require.True(t, strings.HasSuffix(flushed, "data: four\n\n: keep-alive\n\n"), "%q", flushed)
}

// A token written within the interval is flushed when it ends, without
// waiting for another event; Close flushes what still waits.
func TestTokenFlushedAtIntervalEnd(t *testing.T) {
	w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	s := newSSE(w)
	s.flushEvery = 20 * time.Millisecond
	require.NoError(t, s.Token("", []byte("one")))
	require.NoError(t, s.Token("", []byte("two")))
	require.Eventually(t, func() bool {
		_, flushed := w.state()
		return strings.HasSuffix(flushed, "data: two\n\n")
	}, 10*time.Second, time.Millisecond, "the pending token is flushed when the interval ends")

	s.flushEvery = time.Hour
	require.NoError(t, s.Token("", []byte("three")))
	s.Close()
	_, flushed := w.state()
	require.True(t, strings.HasSuffix(flushed, "data: three\n\n"), "Close flushes what waits: %q", flushed)
	require.Equal(t, http.StatusOK, w.Code)
}
