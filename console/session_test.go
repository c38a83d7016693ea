package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/console"
)

// A database that stops answering without closing the connection (a
// stalled pooler or network path): a console request that reads or deletes
// its session ends at the Store's bound as a 503 page, rather than waiting
// for as long as its client (scs's pgxstore ran the session statements
// without a deadline); once the database answers again, the same session
// works, and signs out.
func TestStalledDatabaseConsoleIsUnavailableWithinTheBound(t *testing.T) {
	t.Parallel()
	px := dbtest.NewProxy(t, dbtest.New(t))
	e := &env{Env: testenv.NewOn(t, px.URL)}
	e.members = &member.Service{Store: e.App.Store}
	m := e.as(t, e.A.ID, member.Viewer) // signed in through the instance's console

	// A second console on the instance's database, bounded at 500 ms rather
	// than db.DefaultTimeout; the member's cookie is good there too. Its
	// Store's pool (its sessions' too), once armed, stalls the database as
	// a session's delete starts, the session's read before it having gone
	// through.
	var stallDelete atomic.Bool
	sessions, err := db.Open(context.Background(), px.URL, 4, stallOn{
		match: func(sql string) bool {
			return strings.Contains(sql, "INSERT INTO sessions (token, data, expiry) VALUES ($1, ''::bytea") && stallDelete.CompareAndSwap(true, false)
		},
		stall: px.Stall,
	})
	require.NoError(t, err)
	t.Cleanup(sessions.Close)
	store := &db.Store{Pool: sessions, Timeout: 500 * time.Millisecond}
	cons := console.New(console.Deps{
		Store: store, Members: &member.Service{Store: store},
		Accounts: account.New(store, e.App.Auth, e.App.Limits),
	})
	t.Cleanup(cons.Close)
	srv := httptest.NewServer(cons.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(px.Restore) // first: a request left stalled must end for srv.Close to
	bounded := *e.Env
	bounded.URL = srv.URL
	hc := *m.http
	hc.Timeout = 10 * time.Second // the test's own deadline, past the bound
	signedIn := &client{t: t, e: &env{Env: &bounded, members: e.members}, http: &hc, Member: m.Member}

	p := signedIn.get("/console/plans")
	require.Equal(t, http.StatusOK, p.Status, p.Body)

	px.Stall()
	start := time.Now()
	p = signedIn.get("/console/plans") // the session's read stalls
	require.Less(t, time.Since(start), 3*time.Second)
	require.Equal(t, http.StatusServiceUnavailable, p.Status, p.Body)
	require.Equal(t, "the database is unavailable; try again", p.Text(`[data-testid="error"]`))

	px.Restore()
	require.Eventually(t, func() bool { return signedIn.get("/console/plans").Status == http.StatusOK },
		5*time.Second, 50*time.Millisecond)

	// Signing out reads the session, then deletes it: the delete stalls.
	// (Last: the stalled delete may yet reach the database on Restore.)
	stallDelete.Store(true)
	start = time.Now()
	p = signedIn.post("/console/signout", nil)
	require.Less(t, time.Since(start), 3*time.Second)
	require.False(t, stallDelete.Load(), "the sign-out deleted no session")
	require.Equal(t, http.StatusServiceUnavailable, p.Status, p.Body)
	require.Equal(t, "the database is unavailable; try again", p.Text(`[data-testid="error"]`))

	px.Restore()
	require.Eventually(t, func() bool { return signedIn.post("/console/signout", nil).Status == http.StatusSeeOther },
		5*time.Second, 50*time.Millisecond)
	p = signedIn.get("/console/plans")
	require.Equal(t, http.StatusSeeOther, p.Status, "signed out, the session still works")
}

// stallOn calls stall as a statement that match takes starts, before it
// is sent.
type stallOn struct {
	match func(sql string) bool
	stall func()
}

func (s stallOn) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if s.match(data.SQL) {
		s.stall()
	}
	return ctx
}

func (stallOn) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
