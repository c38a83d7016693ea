package conversation_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/agent"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/conversation"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/handoff"
)

// store is a database with organization A, an agent of A's and
// conversations c1 and c2 of that agent.
type store struct {
	url    string
	db     *db.Store
	org    uuid.UUID
	member context.Context
}

func newStore(t *testing.T) *store {
	t.Helper()
	ctx := context.Background()
	u := dbtest.New(t)
	pool, err := db.Open(ctx, u, 4, nil)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := &store{url: u, db: &db.Store{Pool: pool}}
	s.org, _, err = account.Bootstrap(ctx, s.db, "A", "pro")
	require.NoError(t, err)
	s.member = auth.WithPrincipal(ctx, &auth.Principal{OrgID: s.org, Scopes: []string{"admin", "chat"}})
	resp, err := agent.NewHandler(s.db, nil, nil).CreateAgent(s.member, &parleyv1.CreateAgentRequest{Name: "a", Instructions: "i"})
	require.NoError(t, err)
	a := uuid.MustParse(resp.GetAgent().GetId())
	require.NoError(t, s.db.Tenant(ctx, s.org, func(q *dbq.Queries) error {
		for _, id := range []string{"c1", "c2"} {
			if _, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: s.org, ID: id, AgentID: a, Channel: "api"}); err != nil {
				return err
			}
		}
		return nil
	}))
	return s
}

// say stores a visitor's message in conversation id.
func (s *store) say(t *testing.T, id, text string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.db.Tenant(ctx, s.org, func(q *dbq.Queries) error {
		_, err := q.CreateMessage(ctx, dbq.CreateMessageParams{OrgID: s.org, ID: uuid.Must(uuid.NewV7()), ConversationID: id,
			Role: "user", Content: text, Channel: "api", Attachments: []byte("[]"), Sources: []byte("[]")})
		return err
	}))
}

func woken(t *testing.T, s *conversation.Sub, want bool) {
	t.Helper()
	wait := 5 * time.Second
	if !want {
		wait = 300 * time.Millisecond
	}
	select {
	case <-s.C:
		require.True(t, want, "woken for another conversation")
	case <-time.After(wait):
		require.False(t, want, "not woken")
	}
}

// newHub returns a hub over pool that is closed, its listener with it,
// when t ends (before pool closes).
func newHub(t *testing.T, pool *pgxpool.Pool, store *db.Store) *conversation.Hub {
	t.Helper()
	hub := conversation.NewHub(pool, store)
	t.Cleanup(hub.Close)
	return hub
}

// A hub on one pool is woken by what another pool (another instance)
// commits, for the conversation it follows only; it stops listening when
// nobody follows, and listens again for the next one.
func TestHubAcrossPools(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	pool, err := db.Open(ctx, s.url, 2, nil)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	hub := newHub(t, pool, &db.Store{Pool: pool})
	hub.Linger = 0

	sub, err := hub.Subscribe(ctx, s.org, "c1")
	require.NoError(t, err)
	s.say(t, "c1", "hello")
	woken(t, sub, true)
	s.say(t, "c2", "elsewhere")
	woken(t, sub, false)
	_, err = s.db.Pool.Exec(ctx, "SELECT pg_notify('parley_conversation', 'garbage')")
	require.NoError(t, err)
	woken(t, sub, false)

	// A second organization's c1 is another conversation.
	other, _, err := account.Bootstrap(ctx, s.db, "B", "pro")
	require.NoError(t, err)
	subB, err := hub.Subscribe(ctx, other, "c1")
	require.NoError(t, err)
	s.say(t, "c1", "again")
	woken(t, sub, true)
	woken(t, subB, false)
	subB.Close()
	sub.Close()
	sub.Close() // twice is harmless

	// Listening again after everyone left.
	sub, err = hub.Subscribe(ctx, s.org, "c2")
	require.NoError(t, err)
	defer sub.Close()
	s.say(t, "c2", "back")
	woken(t, sub, true)

	// Subscribing with a context already done fails.
	done, cancel := context.WithCancel(ctx)
	cancel()
	hub2 := newHub(t, pool, &db.Store{Pool: pool})
	_, err = hub2.Subscribe(done, s.org, "c1")
	require.ErrorIs(t, err, context.Canceled)
}

// notified reports whether a notification on the conversations' channel
// reaches conn within wait.
func notified(t *testing.T, conn *pgx.Conn, wait time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := conn.WaitForNotification(ctx)
	if err != nil {
		require.ErrorIs(t, err, context.DeadlineExceeded)
		return false
	}
	return true
}

// A conversation's commits notify only while a hub holds its lease (a
// notifying commit waits for every other one): not before anyone follows,
// for the followed conversation only, and not once its lease has expired.
func TestOnlyFollowedConversationsNotify(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	_, err = conn.Exec(ctx, "LISTEN parley_conversation")
	require.NoError(t, err)

	s.say(t, "c1", "nobody follows")
	require.False(t, notified(t, conn, 300*time.Millisecond), "a conversation nobody follows notified")

	hub := newHub(t, s.db.Pool, s.db)
	sub, err := hub.Subscribe(ctx, s.org, "c1")
	require.NoError(t, err)
	defer sub.Close()
	s.say(t, "c2", "not followed")
	require.False(t, notified(t, conn, 300*time.Millisecond), "another conversation notified")
	s.say(t, "c1", "followed")
	require.True(t, notified(t, conn, 5*time.Second), "the followed conversation did not notify")
	woken(t, sub, true)

	// The lease lapses (as when an instance dies holding it).
	require.NoError(t, s.db.TenantTx(ctx, s.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		tag, err := tx.Exec(ctx, "UPDATE conversation_follows SET until = now() - interval '1 second' WHERE conversation_id = 'c1'")
		if err == nil && tag.RowsAffected() != 1 {
			t.Errorf("%d leases of c1, want 1", tag.RowsAffected())
		}
		return err
	}))
	s.say(t, "c1", "lease expired")
	require.False(t, notified(t, conn, 300*time.Millisecond), "a lapsed lease still notified")
}

// A stream opens with a heartbeat carrying its starting point, sends the
// events after it in order (a message, a status change by the agent's
// request_human), and says it is alive when quiet.
func TestWatchRunAndRequestHuman(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	svc := &conversation.Service{Store: s.db, Live: newHub(t, s.db.Pool, s.db), Heartbeat: 50 * time.Millisecond}
	s.say(t, "c1", "first")
	p, err := conversation.MemberParty(s.member, "ada@example.com")
	require.NoError(t, err)

	w, err := svc.Follow(ctx, p, "c1", nil)
	require.NoError(t, err)
	got := make(chan *parleyv1.WatchConversationResponse, 32)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- w.Run(runCtx, func(ev *parleyv1.WatchConversationResponse) error { got <- ev; return nil })
	}()
	next := func(skipHeartbeats bool) *parleyv1.WatchConversationResponse {
		t.Helper()
		for {
			select {
			case ev := <-got:
				if skipHeartbeats && ev.GetHeartbeat() != nil {
					continue
				}
				return ev
			case <-time.After(5 * time.Second):
				t.Fatal("no event")
			}
		}
	}
	hb := next(false)
	require.NotNil(t, hb.GetHeartbeat())
	require.Equal(t, int64(1), hb.GetEventId(), "from now: after the one message so far")

	var changed bool
	require.NoError(t, s.db.TenantTx(ctx, s.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		changed, err = handoff.RequestHuman(ctx, tx, nil, s.org, "c1", "the visitor asked for a person")
		return err
	}))
	require.True(t, changed)
	ev := next(true)
	require.Equal(t, int64(2), ev.GetEventId())
	require.Equal(t, "human_requested", ev.GetStatus().GetStatus())
	require.Equal(t, "agent", ev.GetStatus().GetChangedBy())
	require.Equal(t, "the visitor asked for a person", ev.GetStatus().GetReason())

	// Asked again: nothing changes, nothing is sent.
	require.NoError(t, s.db.TenantTx(ctx, s.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		changed, err = handoff.RequestHuman(ctx, tx, nil, s.org, "c1", "again")
		return err
	}))
	require.False(t, changed)
	err = s.db.TenantTx(ctx, s.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		_, err := handoff.RequestHuman(ctx, tx, nil, s.org, "nope", "")
		return err
	})
	require.ErrorIs(t, err, handoff.ErrNotFound)

	// A member's reply, signed with its email.
	m, sum, err := svc.Reply(ctx, p, "c1", time.Time{}, "Hello, I am Ada from support.", "dashboard")
	require.NoError(t, err)
	require.Equal(t, "ada@example.com", m.Author)
	require.Equal(t, "human_requested", sum.GetStatus())
	ev = next(true)
	require.Equal(t, int64(3), ev.GetEventId())
	require.Equal(t, "human", ev.GetMessage().GetRole())
	require.Equal(t, "ada@example.com", ev.GetMessage().GetAuthor())

	// Quiet: heartbeats carry the last event sent.
	hb = next(false)
	require.NotNil(t, hb.GetHeartbeat())
	require.Equal(t, int64(3), hb.GetEventId())

	stop()
	require.NoError(t, <-ran)

	// A viewer (no admin scope) neither replies nor changes a status.
	viewer, err := conversation.MemberParty(auth.WithPrincipal(ctx, &auth.Principal{OrgID: s.org}), "v@example.com")
	require.NoError(t, err)
	_, _, err = svc.Reply(ctx, viewer, "c1", time.Time{}, "hi", "dashboard")
	require.Error(t, err)
	resolved := "resolved"
	_, err = svc.Update(ctx, viewer, "c1", conversation.Change{Status: &resolved})
	require.Error(t, err)

	// Resuming after an event, and a starting point beyond the last event
	// (a client's stale id from elsewhere), which starts from now.
	one, big := int64(1), int64(1000)
	w, err = svc.Follow(ctx, p, "c1", &one)
	require.NoError(t, err)
	var evs []*parleyv1.WatchConversationResponse
	runCtx, stop = context.WithCancel(ctx)
	go func() {
		_ = w.Run(runCtx, func(ev *parleyv1.WatchConversationResponse) error {
			evs = append(evs, ev)
			if len(evs) == 3 {
				stop()
			}
			return nil
		})
		close(ran)
	}()
	<-ran
	require.Len(t, evs, 3)
	require.Equal(t, int64(2), evs[1].GetEventId())
	require.Equal(t, int64(3), evs[2].GetEventId())
	w, err = svc.Follow(ctx, p, "c1", &big)
	require.NoError(t, err)
	w.Close()
}

// A stream ends by itself once it has lasted StreamLife, as at a drain: its
// client reconnects where it left off.
func TestStreamLife(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	svc := &conversation.Service{Store: s.db, Live: newHub(t, s.db.Pool, s.db), Heartbeat: time.Hour, StreamLife: 200 * time.Millisecond}
	s.say(t, "c1", "first")
	p, err := conversation.MemberParty(s.member, "ada@example.com")
	require.NoError(t, err)
	w, err := svc.Follow(ctx, p, "c1", nil)
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx, func(*parleyv1.WatchConversationResponse) error { return nil }) }()
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream outlived its life")
	}
}

// A database out of reach for a second (a failover, a network blip) does
// not end a watch stream: it reads again once the database answers, and
// the events stored meanwhile and after reach it. Before, every stream of
// the instance ended at once and their clients all came back together.
// With a heartbeat of an hour, only the hub's listener can bring them:
// its connection was closed with the rest, so it listened again.
func TestWatchOutlivesADatabaseBlip(t *testing.T) {
	t.Parallel()
	for _, heartbeat := range []time.Duration{50 * time.Millisecond, time.Hour} {
		t.Run(heartbeat.String(), func(t *testing.T) {
			t.Parallel()
			watchThroughABlip(t, heartbeat)
		})
	}
}

func watchThroughABlip(t *testing.T, heartbeat time.Duration) {
	s := newStore(t)
	ctx := context.Background()
	px := dbtest.NewProxy(t, s.url)
	pool, err := db.Open(ctx, px.URL, 4, nil)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(px.Restore)
	through := &db.Store{Pool: pool}
	svc := &conversation.Service{Store: through, Live: newHub(t, pool, through), Heartbeat: heartbeat}
	p, err := conversation.MemberParty(s.member, "ada@example.com")
	require.NoError(t, err)
	w, err := svc.Follow(ctx, p, "c1", nil)
	require.NoError(t, err)
	got := make(chan *parleyv1.WatchConversationResponse, 256)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- w.Run(runCtx, func(ev *parleyv1.WatchConversationResponse) error { got <- ev; return nil })
	}()
	message := func(want string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case ev := <-got:
				if ev.GetMessage().GetText() == want {
					return
				}
			case err := <-ran:
				t.Fatalf("the stream ended: %v", err)
			case <-deadline:
				t.Fatalf("%q never came", want)
			}
		}
	}
	s.say(t, "c1", "before")
	message("before")

	px.Cut() // every connection closed, new ones refused
	s.say(t, "c1", "during")
	time.Sleep(time.Second) // a 50 ms heartbeat's twenty reads fail meanwhile
	px.Restore()
	message("during")
	s.say(t, "c1", "after")
	message("after")
	stop()
	require.NoError(t, <-ran)
}

// A hub closed while it lingers (its last stream gone, its Linger not
// passed) closes its listening connection at once, and follows no more
// conversations: the connection is out of the pool, which closing the
// pool does not close, and it was left listening for Linger, to a closed
// pool's database.
func TestHubClose(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	hub := conversation.NewHub(s.db.Pool, s.db)
	sub, err := hub.Subscribe(ctx, s.org, "c1")
	require.NoError(t, err)
	sub.Close()
	listening := func() int {
		var n int
		require.NoError(t, s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE '%LISTEN parley_conversation%'`).Scan(&n))
		return n
	}
	require.Equal(t, 1, listening(), "the lingering hub's connection")

	hub.Close()
	// The server ends the connection's backend as it reads its end.
	require.Eventually(t, func() bool { return listening() == 0 }, 5*time.Second, 10*time.Millisecond, "a closed hub still listens")
	_, err = hub.Subscribe(ctx, s.org, "c1")
	require.Equal(t, apperr.Unavailable, apperr.CodeOf(err))
	hub.Close() // twice is harmless
}
