package knowledge

import (
	"context"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/semaphore"

	"github.com/parleyhq/parley/backend/apperr"
)

// UploadBudgetBytes is how many bytes of datasources' uploads (a file over
// REST, Connect or the console, or a text too large for a form) one
// instance reads at once, by what their requests declare: some twelve
// files of MaxFileBytes. An upload holds about three times its size while
// it is read, decoded and stored (its body, the message, the statement's
// parameters).
//
// SECURITY: without it, an organization's key sending many large uploads
// at once (each request counted by the rate limits, none bounded while it
// runs) held memory without bound: a hundred held some 6 GB, and every
// tenant's requests on the instance shared its fate.
const UploadBudgetBytes = 256 << 20

// UploadWait is how long an upload waits for room in the budget before it
// is refused with 503 OVERLOADED.
const UploadWait = 10 * time.Second

// uploadRetryAfter is the retryAfter of an upload refused for room.
const uploadRetryAfter = 5 * time.Second

// UploadBudget bounds the bytes of uploads an instance reads at once (see
// UploadBudgetBytes). A nil budget bounds nothing.
type UploadBudget struct {
	sem  *semaphore.Weighted
	wait time.Duration
}

// NewUploadBudget is a budget of n bytes, an upload waiting up to wait for
// room.
func NewUploadBudget(n int64, wait time.Duration) *UploadBudget {
	return &UploadBudget{sem: semaphore.NewWeighted(n), wait: wait}
}

// Hold takes room for r's body before it is read: its declared length, or
// limit when it declares none (chunked) or more (it is then refused at
// limit while read). It waits for room while r lasts, up to the budget's
// wait, then returns 503 OVERLOADED. release gives the room back once the
// upload is stored or refused.
func (b *UploadBudget) Hold(r *http.Request, limit int64) (release func(), err error) {
	return b.hold(r, r.ContentLength, limit)
}

// hold is Hold for a body that declares length bytes (-1: unknown).
func (b *UploadBudget) hold(r *http.Request, length, limit int64) (release func(), err error) {
	n := limit
	if length >= 0 && length < limit {
		n = length
	}
	if b == nil || n <= 0 {
		return func() {}, nil
	}
	if !b.sem.TryAcquire(n) {
		ctx, cancel := context.WithTimeout(r.Context(), b.wait)
		defer cancel()
		if err := b.sem.Acquire(ctx, n); err != nil {
			if r.Context().Err() != nil {
				return nil, r.Context().Err()
			}
			e := apperr.New(apperr.Overloaded, "this server reads as many uploads as it may at once; try again shortly")
			e.RetryAfter = uploadRetryAfter
			return nil, e
		}
	}
	return func() { b.sem.Release(n) }, nil
}

// Holding serves next, a Connect handler whose body (the message, read
// before the method runs) is an upload of at most limit bytes, with room
// held for it (Hold); refused, it answers in the request's protocol.
//
// SECURITY: a compressed message holds limit, whatever its body's length:
// Connect and gRPC decompress it up to limit before the method runs, and a
// body of a few kilobytes (gzip's zeros) held only its few kilobytes of
// the budget while it took up to limit of memory.
func (b *UploadBudget) Holding(limit int64, next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		length := r.ContentLength
		if compressed(r.Header) {
			length = -1
		}
		release, err := b.hold(r, length, limit)
		if err != nil {
			_ = errs.Write(w, r, apperr.ToConnect(r.Context(), err))
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// compressed reports whether a Connect, gRPC or gRPC-Web request's message
// may be compressed: its length on the wire then says nothing of its size.
func compressed(h http.Header) bool {
	for _, k := range []string{"Content-Encoding", "Connect-Content-Encoding", "Grpc-Encoding"} {
		for _, v := range h.Values(k) {
			if v = strings.TrimSpace(v); v != "" && !strings.EqualFold(v, "identity") {
				return true
			}
		}
	}
	return false
}
