package chat

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/semaphore"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/metrics"
)

// overloadedRetryAfter is what a turn refused by the queue is told to wait:
// turns last seconds, so a slot is likely to have freed by then.
const overloadedRetryAfter = time.Second

// TurnQueue admits chat turns: at most Running run at once, at most Waiting
// more wait for a slot, first come first served; a turn past both is refused
// at once with 503 OVERLOADED and retryAfter. A waiting turn leaves the
// queue when its client goes away, when the server shuts down, or when its
// wait reaches the turn's timeout (then it is refused like the others:
// nothing was done yet).
//
// Bounding turns keeps an overloaded instance answering: every admitted
// turn gets its database connections and its CPU share soon, instead of all
// of them queueing in the pool and their streams stalling (issue 13); the
// rest are told to come back, or go to another instance.
//
// The queue is shared by every organization, so ShareByOrg bounds what one
// of them holds: without it, one organization's public agents (many
// visitors, each within its own rate limit) could take every slot and
// every waiting place, and every other organization's turns would be
// refused.
type TurnQueue struct {
	// slots holds a token per running turn. A channel's blocked senders are
	// served in order, and a slot freed while turns wait goes to the first
	// of them (the buffer stays full), so a newcomer never overtakes them.
	slots   chan struct{}
	waiting atomic.Int64
	limit   int64
	// loads holds a token per turn in its load phase (LimitLoads); nil:
	// no bound.
	loads chan struct{}
	// attachmentBytes bounds the attachments' bytes the turns hold
	// (LimitAttachments); nil: no bound.
	attachmentBytes *semaphore.Weighted
	// orgMax is how many turns one organization may hold, running or
	// waiting (ShareByOrg); 0: no bound. held counts them by organization
	// (an organization with none has no entry), under mu.
	orgMax int64
	mu     sync.Mutex
	held   map[uuid.UUID]int64
}

// DefaultOrgShare is the percentage of a queue's slots and waiting places
// together that one organization may hold unless told otherwise
// (ShareByOrg).
const DefaultOrgShare = 50

// ShareByOrg bounds the turns one organization holds at once, running and
// waiting together, to percent of the queue's slots plus waiting places
// (rounded up, at least 1); 100 or more, or 0 or less: no bound. A turn of an
// organization at its share is refused at once with the same 503
// OVERLOADED and retryAfter as a full queue (reason "org_share" in
// parley_chat_turn_rejections_total), before it takes a slot or a place.
//
// Why half by default: at most two organizations can then fill the queue,
// never one, so a noisy neighbour leaves the others at least half of it,
// and their turns wait in order behind its running ones instead of being
// refused. And an organization alone on an idle instance still gets a good
// part of it: with the default wait list (as long as the slots) half of
// slots plus places is every slot, so it can run as many turns as the
// instance runs; only the wait list is kept for others (its turns past the
// slots are refused rather than queued). With a --turn-queue much shorter
// than --max-turns it is about half the slots. A deployment serving one
// organization gives 100. The bound is per instance, like the queue.
// Call it before the queue is used.
func (q *TurnQueue) ShareByOrg(percent int) *TurnQueue {
	if percent <= 0 || percent >= 100 {
		q.orgMax = 0
		return q
	}
	total := int64(cap(q.slots)) + q.limit
	q.orgMax = max((total*int64(percent)+99)/100, 1)
	q.held = make(map[uuid.UUID]int64)
	return q
}

// holdForOrg counts a turn of org, or refuses it when org holds its share;
// the returned func gives the place back.
func (q *TurnQueue) holdForOrg(org uuid.UUID) (release func(), err error) {
	if q.orgMax == 0 {
		return func() {}, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held[org] >= q.orgMax {
		metrics.TurnRejected("org_share")
		return nil, overloaded("this organization already has %d chat turns running and waiting on this server, its share; try again shortly", q.orgMax)
	}
	q.held[org]++
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.held[org]--; q.held[org] <= 0 {
			delete(q.held, org)
		}
	}, nil
}

// LimitAttachments bounds the bytes of attachments the running turns hold
// at once: each attachment counts AttachmentMaxBytes while it is fetched
// and read, and an image its size until its turn ends (it is sent to the
// model as bytes). A turn waits for room as for a slot. Without it, a
// public agent's visitors could make an instance hold 10 MiB of images a
// turn for as long as the model answers, times every turn running. What
// reading a document allocates beside its bytes is not counted here: it is
// bounded for each file by knowledge's extraction limits.
// Call it before the queue is used.
func (q *TurnQueue) LimitAttachments(bytes int64) *TurnQueue {
	if bytes > 0 {
		q.attachmentBytes = semaphore.NewWeighted(bytes)
	}
	return q
}

// heldBytes is room taken in the attachments' budget.
type heldBytes struct {
	sem *semaphore.Weighted
	n   int64
}

// holdBytes takes room for n bytes of attachments, waiting while ctx
// lasts, drain does not end and wait (0: no bound) has not passed.
func (q *TurnQueue) holdBytes(ctx, drain context.Context, wait time.Duration, n int64) (*heldBytes, error) {
	if q == nil || q.attachmentBytes == nil || n == 0 {
		return &heldBytes{}, nil
	}
	if q.attachmentBytes.TryAcquire(n) {
		return &heldBytes{q.attachmentBytes, n}, nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if wait > 0 {
		wctx, cancel = context.WithTimeout(wctx, wait)
		defer cancel()
	}
	if drain != nil {
		stop := context.AfterFunc(drain, cancel)
		defer stop()
	}
	if err := q.attachmentBytes.Acquire(wctx, n); err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case drain != nil && drain.Err() != nil:
			return nil, errShuttingDown
		}
		metrics.TurnRejected("attachments_wait")
		return nil, overloaded("no room for more attachments freed within %s on this server; try again shortly", wait)
	}
	return &heldBytes{q.attachmentBytes, n}, nil
}

// keep gives back all but n of the bytes held.
func (h *heldBytes) keep(n int64) {
	if h.sem != nil && n < h.n {
		h.sem.Release(h.n - n)
		h.n = n
	}
}

// release gives back the bytes held.
func (h *heldBytes) release() { h.keep(0) }

// LimitLoads bounds how many running turns are in their load phase at once
// (reading the conversation, storing the question: the database work
// before the model is called); the others wait for a place, first come
// first served. Storing answers takes none, so with the pool busy an answer
// waits for a connection behind at most n loads, not behind every turn just
// started: at 5,000 streams about 1,500 answers queued behind new turns'
// loads and passed their store timeout (issue 13, docs/benchmarks.md).
// Call it before the queue is used.
func (q *TurnQueue) LimitLoads(n int) *TurnQueue {
	if n > 0 {
		q.loads = make(chan struct{}, n)
	}
	return q
}

// acquireLoad takes a place for a turn's load phase, waiting while ctx
// lasts; release gives it back.
func (q *TurnQueue) acquireLoad(ctx context.Context) (release func(), err error) {
	if q == nil || q.loads == nil {
		return func() {}, nil
	}
	select {
	case q.loads <- struct{}{}:
		return func() { <-q.loads }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// NewTurnQueue admits running turns at once and lets waiting more wait.
func NewTurnQueue(running, waiting int) *TurnQueue {
	return &TurnQueue{slots: make(chan struct{}, max(running, 1)), limit: int64(max(waiting, 0))}
}

// Running is how many turns hold a slot.
func (q *TurnQueue) Running() int { return len(q.slots) }

// Waiting is how many turns wait for one.
func (q *TurnQueue) Waiting() int { return int(q.waiting.Load()) }

// acquire takes a slot for a turn of org, waiting for one while ctx lasts,
// drain does not end and wait (0: no bound) has not passed; a turn of an
// organization at its share (ShareByOrg) is refused first. release gives
// the slot back. This is the one place a turn is admitted or refused.
func (q *TurnQueue) acquire(ctx, drain context.Context, wait time.Duration, org uuid.UUID) (release func(), err error) {
	if q == nil {
		return func() {}, nil
	}
	releaseOrg, err := q.holdForOrg(org)
	if err != nil {
		return nil, err
	}
	releaseSlot, err := q.acquireSlot(ctx, drain, wait)
	if err != nil {
		releaseOrg()
		return nil, err
	}
	return func() { releaseSlot(); releaseOrg() }, nil
}

// acquireSlot is acquire without the organizations' shares.
func (q *TurnQueue) acquireSlot(ctx, drain context.Context, wait time.Duration) (release func(), err error) {
	release = func() { <-q.slots }
	select {
	case q.slots <- struct{}{}:
		return release, nil
	default:
	}
	if q.waiting.Add(1) > q.limit {
		q.waiting.Add(-1)
		metrics.TurnRejected("queue_full")
		return nil, overloaded("too many chat turns are running and waiting on this server; try again shortly")
	}
	defer q.waiting.Add(-1)
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	var drained <-chan struct{}
	if drain != nil {
		drained = drain.Done()
	}
	select {
	case q.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-drained:
		return nil, errShuttingDown
	case <-timeout:
		metrics.TurnRejected("queue_wait")
		return nil, overloaded("no chat turn slot freed within %s on this server; try again shortly", wait)
	}
}

func overloaded(format string, args ...any) error {
	e := apperr.New(apperr.Overloaded, format, args...)
	e.RetryAfter = overloadedRetryAfter
	return e
}
