// Package leaktest checks that a package's tests leave no goroutine
// running: a stream, watcher, timer-driven loop or flusher that outlives
// its request or owner accumulates in a long-running server. It knows the
// goroutines libraries keep by design; it is for tests only.
package leaktest

import (
	"testing"

	"go.uber.org/goleak"
)

// ignore are the libraries' goroutines that are not leaks, each named by
// the function at the top of its stack.
var ignore = []goleak.Option{
	// OpenCensus (linked in through Google's API clients) starts its stats
	// worker in an init function, for the life of the process.
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	// ulule/limiter's memory store (ratelimit.NewMemory) has no Close: its
	// cleaner stops when a finalizer finds the store unreachable, which a
	// test's end does not wait for.
	goleak.IgnoreTopFunction("github.com/ulule/limiter/v3/drivers/store/memory.(*cleaner).Run"),
	// scs.New starts its default in-memory store's cleanup (one per
	// console: the console replaces the store at once). MemStore's
	// StopCleanup cannot stop it: it reads the channel the goroutine sets
	// without synchronisation, so a call right after New finds none.
	goleak.IgnoreTopFunction("github.com/alexedwards/scs/v2/memstore.(*MemStore).startCleanup"),
}

// VerifyTestMain runs the package's tests (call it from TestMain) and fails
// them when goroutines other than ignore's are left once they pass.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m, ignore...)
}
