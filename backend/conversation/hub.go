package conversation

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// Hub wakes the streams that follow conversations when the database says
// one of them has new events. While at least one stream follows a
// conversation, one connection taken out of the pool LISTENs on channel
// parley_conversation, where every instance's commits notify (the triggers
// of migrations 00010 and 00017), and the hub fans each notification out in
// process to the streams of that conversation. Commits notify only for
// conversations someone follows (a notifying commit waits for every other
// one): the hub leases each followed conversation in conversation_follows
// for FollowLease before Subscribe returns, and renews the leases of its
// conversations every FollowRenew. A wake-up carries nothing: streams read
// the events from the database, after the last one they sent, so a
// notification lost with a broken connection costs only latency (the hub
// wakes every stream once it listens again, and streams read again at each
// heartbeat).
type Hub struct {
	pool  *pgxpool.Pool
	store *db.Store
	// Linger keeps the connection listening this long after the last
	// stream ends, so that a client reconnecting does not reopen it.
	Linger time.Duration

	mu     sync.Mutex
	subs   map[topic]map[*Sub]struct{}
	n      int
	l      *listener
	linger *time.Timer
	// closed refuses new subscriptions once Close ran; running counts
	// the listeners' goroutines (run and renew), which Close waits for.
	closed  bool
	running sync.WaitGroup
}

type topic struct {
	org  uuid.UUID
	conv string
}

// listener is one run of the listening connection.
type listener struct {
	cancel context.CancelFunc
	// ready is closed once LISTEN first succeeded, or failed (err).
	ready chan struct{}
	err   error
}

// FollowLease is how long a conversation's commits notify after its hub
// last leased it; FollowRenew is how often a hub renews its leases.
// FollowGrace is when a new stream reads its conversation's events once
// more, for a write that was under way while its lease was taken.
const (
	FollowLease = 90 * time.Second
	FollowRenew = 30 * time.Second
	FollowGrace = time.Second
)

// NewHub returns a hub over pool's database; store writes the leases.
func NewHub(pool *pgxpool.Pool, store *db.Store) *Hub {
	return &Hub{pool: pool, store: store, Linger: 30 * time.Second, subs: map[topic]map[*Sub]struct{}{}}
}

// Sub is one stream's subscription to a conversation.
type Sub struct {
	// C receives a value when the conversation may have new events;
	// wake-ups coalesce.
	C <-chan struct{}
	c chan struct{}

	h    *Hub
	t    topic
	once sync.Once
}

// Subscribe follows a conversation of org. It returns once the hub
// listens and the conversation's lease is committed: any event written
// after that wakes the Sub. (An event whose statement ran before the lease
// committed and whose transaction commits after Subscribe returns does not:
// readers read again FollowGrace after subscribing.)
// Unavailable when the database cannot be listened to, or the hub is closed.
func (h *Hub) Subscribe(ctx context.Context, org uuid.UUID, conv string) (*Sub, error) {
	c := make(chan struct{}, 1)
	s := &Sub{C: c, c: c, h: h, t: topic{org, conv}}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, unavailable()
	}
	if h.subs[s.t] == nil {
		h.subs[s.t] = map[*Sub]struct{}{}
	}
	h.subs[s.t][s] = struct{}{}
	h.n++
	if h.linger != nil {
		h.linger.Stop()
		h.linger = nil
	}
	if h.l == nil {
		h.l = h.start()
	}
	l := h.l
	h.mu.Unlock()
	select {
	case <-l.ready:
		if l.err != nil {
			s.Close()
			return nil, l.err
		}
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	}
	if err := h.lease(ctx, org, []string{conv}); err != nil {
		s.Close()
		slog.Warn("conversation events: cannot lease a conversation's notifications", "err", err)
		return nil, unavailable()
	}
	return s, nil
}

// unavailable is the error of a subscription the hub cannot serve.
func unavailable() error {
	return apperr.New(apperr.Unavailable, "following conversations is unavailable right now; retry")
}

// lease makes commits of org's conversations convs notify for FollowLease.
func (h *Hub) lease(ctx context.Context, org uuid.UUID, convs []string) error {
	return h.store.Tenant(ctx, org, func(q *dbq.Queries) error {
		return q.FollowConversations(ctx, dbq.FollowConversationsParams{
			OrgID: org, Ids: convs, LeaseSeconds: FollowLease.Seconds(),
		})
	})
}

// renew renews the leases of the hub's conversations every FollowRenew
// until ctx ends.
func (h *Hub) renew(ctx context.Context) {
	t := time.NewTicker(FollowRenew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		byOrg := map[uuid.UUID][]string{}
		for tp := range h.subs {
			byOrg[tp.org] = append(byOrg[tp.org], tp.conv)
		}
		h.mu.Unlock()
		for org, convs := range byOrg {
			if err := h.lease(ctx, org, convs); err != nil && ctx.Err() == nil {
				slog.Warn("conversation events: renewing leases", "err", err)
			}
		}
	}
}

// Close ends the subscription.
func (s *Sub) Close() {
	s.once.Do(func() {
		h := s.h
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs[s.t], s)
		if len(h.subs[s.t]) == 0 {
			delete(h.subs, s.t)
		}
		h.n--
		if h.n > 0 || h.l == nil {
			return
		}
		l := h.l
		stop := func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.n == 0 && h.l == l {
				h.l, h.linger = nil, nil
				l.cancel()
			}
		}
		if h.Linger <= 0 {
			h.l = nil
			l.cancel()
			return
		}
		h.linger = time.AfterFunc(h.Linger, stop)
	})
}

// start runs a new listener; h.mu is held.
func (h *Hub) start() *listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{cancel: cancel, ready: make(chan struct{})}
	h.running.Add(2)
	go func() {
		defer h.running.Done()
		h.run(ctx, l)
	}()
	go func() {
		defer h.running.Done()
		h.renew(ctx)
	}()
	return l
}

// Close stops listening, lingering or not, and returns once the listening
// connection is closed; later subscriptions fail (Unavailable). Without
// it the listener outlived its owner: its connection is taken out of the
// pool, so closing the pool does not close it, and it kept listening (or,
// once the database closed it, trying to connect again through the closed
// pool) until the last stream's Linger passed.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	if h.linger != nil {
		h.linger.Stop()
		h.linger = nil
	}
	if h.l != nil {
		h.l.cancel()
		h.l = nil
	}
	h.mu.Unlock()
	h.running.Wait()
}

// run listens until ctx ends, reconnecting with backoff when the
// connection breaks.
func (h *Hub) run(ctx context.Context, l *listener) {
	first := true
	backoff := 250 * time.Millisecond
	for {
		conn, err := h.connect(ctx)
		if err != nil {
			if first {
				h.mu.Lock()
				if h.l == l {
					h.l = nil
				}
				h.mu.Unlock()
				l.cancel()
				slog.Warn("conversation events: cannot listen", "err", err)
				l.err = unavailable()
				close(l.ready)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		if first {
			first = false
			close(l.ready)
		} else {
			h.wakeAll() // notifications may have been missed meanwhile
		}
		backoff = 250 * time.Millisecond
		err = h.receive(ctx, conn)
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = conn.Close(closeCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		// The streams are woken once the hub listens again (above), not
		// now: while the database is out of reach they could read nothing.
		slog.Warn("conversation events: the listening connection broke; reconnecting", "err", err)
	}
}

// connect takes a connection out of the pool (it is not returned: the
// pool opens another when it needs one) and listens on it.
func (h *Hub) connect(ctx context.Context) (*pgx.Conn, error) {
	pc, err := h.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	if err := dbq.New(conn).ListenConversations(ctx); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// receive fans notifications out until the connection fails or ctx ends.
func (h *Hub) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if t, ok := parsePayload(n.Payload); ok {
			h.wake(t)
		}
	}
}

// parsePayload reads a notification: "<org id> <event number> <conversation id>".
func parsePayload(s string) (topic, bool) {
	org, rest, ok := strings.Cut(s, " ")
	if !ok {
		return topic{}, false
	}
	_, conv, ok := strings.Cut(rest, " ")
	id, err := uuid.Parse(org)
	if !ok || err != nil || conv == "" {
		return topic{}, false
	}
	return topic{id, conv}, true
}

func (h *Hub) wake(t topic) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[t] {
		s.wake()
	}
}

func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, subs := range h.subs {
		for s := range subs {
			s.wake()
		}
	}
}

func (s *Sub) wake() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}
