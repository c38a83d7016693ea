package console_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

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
// its session ends at the Store's bound, a signed-in page as a 503 page,
// rather than waiting for as long as its client (scs's pgxstore ran the
// session statements without a deadline); once the database answers
// again, the same session works.
func TestStalledDatabaseConsoleIsUnavailableWithinTheBound(t *testing.T) {
	t.Parallel()
	px := dbtest.NewProxy(t, dbtest.New(t))
	e := &env{Env: testenv.NewOn(t, px.URL)}
	e.members = &member.Service{Store: e.App.Store}
	m := e.as(t, e.A.ID, member.Viewer) // signed in through the instance's console

	// A second console on the instance's pool, bounded at 500 ms rather than
	// db.DefaultTimeout; the member's cookie is good there too.
	store := &db.Store{Pool: e.App.Pool, Timeout: 500 * time.Millisecond}
	srv := httptest.NewServer(console.New(console.Deps{
		Store: store, Pool: e.App.Pool, Members: &member.Service{Store: store},
		Accounts: account.New(store, e.App.Auth, e.App.Limits),
	}).Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(px.Restore) // first: a request left stalled must end for srv.Close to
	bounded := *e.Env
	bounded.URL = srv.URL
	hc := *m.http
	hc.Timeout = 10 * time.Second // the test's own deadline, past the bound
	signedIn := &client{t: t, e: &env{Env: &bounded, members: e.members}, http: &hc, Member: m.Member}
	anon := e.anon(t)
	anon.e, anon.http.Timeout = signedIn.e, hc.Timeout

	p := signedIn.get("/console/plans")
	require.Equal(t, http.StatusOK, p.Status, p.Body)

	px.Stall()
	start := time.Now()
	p = signedIn.get("/console/plans") // the session's read stalls
	require.Less(t, time.Since(start), 3*time.Second)
	require.Equal(t, http.StatusServiceUnavailable, p.Status, p.Body)
	require.Equal(t, "the database is unavailable; try again", p.Text(`[data-testid="error"]`))

	start = time.Now()
	p = anon.get("/console/") // no session: signedIn's Destroy deletes, and stalls
	require.Less(t, time.Since(start), 3*time.Second)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)

	px.Restore()
	require.Eventually(t, func() bool { return signedIn.get("/console/plans").Status == http.StatusOK },
		5*time.Second, 50*time.Millisecond)
}
