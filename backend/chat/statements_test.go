package chat_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// statements counts the statements a pool sends, with their SQL, and its
// round trips to Postgres while it is on: a statement sent alone is one, a
// batch (pgx.Batch: statements pipelined) is one for all of its statements.
type statements struct {
	mu    sync.Mutex
	on    bool
	sql   []string
	trips int
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		s.sql = append(s.sql, strings.Join(strings.Fields(d.SQL), " "))
		s.trips++
	}
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		s.trips++
	}
	return ctx
}

func (s *statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		s.sql = append(s.sql, "(batch) "+strings.Join(strings.Fields(d.SQL), " "))
	}
}

func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// during returns the statements sent while fn ran, and the round trips.
func (s *statements) during(fn func()) ([]string, int) {
	s.mu.Lock()
	s.on, s.sql, s.trips = true, nil, 0
	s.mu.Unlock()
	fn()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on = false
	return s.sql, s.trips
}

// A chat turn's round trips to Postgres and its statements are counted, so
// that neither can creep back up (issue 13): a JSON turn of a key whose
// record is cached, on an agent without datastores, continuing a
// conversation and starting one. Each transaction's first statements go
// with its BEGIN and settings in one batch, and the answer's insert touches
// the conversation. The turn's webhook events
// (conversation.created, message.created) cost nothing here: the
// organization has no endpoint, which the Emitter remembers (CacheTTL) from
// the warm-up turn on. The limits are today's counts; lower them when a
// change saves a round trip.
func TestStatementsPerTurn(t *testing.T) {
	t.Parallel()
	var st statements
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithWorkers, testenv.WithFakeModels(fake), func(c *server.Config) {
		c.DBTracer = &st
		c.Workers = 0 // no job polling on the pool while counting
	})
	f := &fixture{Env: e, fake: fake}
	agent := f.agent(t, `{"name":"Counted","instructions":"Be brief."}`)
	turn := func(conv string) ([]string, int) {
		return st.during(func() {
			status, _, r := f.chat(t, agent, f.A.Key, `{"query":"hello","conversationId":"`+conv+`"}`)
			require.Equal(t, http.StatusOK, status, "%s", r.Body)
		})
	}
	turn("warm-up") // the key's record and the agent are cached from here on

	for _, tc := range []struct {
		name       string
		conv       string
		maxTrips   int
		statements int
	}{
		// admit: none (the agent is cached). load: one batch (begin,
		// scope, the conversation's insert under the client's id, its
		// row, history, datastores, the question's insert where the turn
		// may join, a durable commit); persist: one batch (begin, scope,
		// the answer, commit: the organization has no webhook endpoint).
		// Two round trips, 12 statements. (A connection that has not
		// prepared a batch's statements yet spends one more round trip on
		// that, once; the tracer does not see it.) (17 round trips before
		// the scopes rode on BEGIN, the inserts touched the conversation
		// and agents were cached; 9 before the batches; 5 before the
		// answer's commit went with it; 4 before the question's did.)
		{"continuing a conversation", "warm-up", 2, 12},
		// The same statements: the conversation's insert creates it.
		{"starting a conversation", "fresh", 2, 12},
	} {
		sql, trips := turn(tc.conv)
		t.Logf("%s: %d round trips, %d statements:\n%s", tc.name, trips, len(sql), strings.Join(sql, "\n"))
		require.LessOrEqual(t, trips, tc.maxTrips, "%s: round trips", tc.name)
		require.LessOrEqual(t, len(sql), tc.statements, "%s: statements", tc.name)
		begins := 0
		for i, s := range sql {
			if s == "(batch) begin" || s == "begin" {
				begins++
				require.Less(t, i+1, len(sql))
				require.Contains(t, sql[i+1], "set_config($1, $2, true)", "every transaction is scoped as it begins")
			}
		}
		require.Equal(t, 2, begins, "%s: two transactions", tc.name)
		require.Equal(t, "(batch) commit", sql[len(sql)-1], "%s: the answer's commit goes with its insert", tc.name)
		require.Contains(t, sql[len(sql)-6], "INSERT INTO messages", "%s: the question's insert", tc.name)
		require.Equal(t, "(batch) commit", sql[len(sql)-5], "%s: the question's commit goes with its insert", tc.name)
	}

	// A conversation id of another caller: the first batch stores nothing
	// and the turn starts a conversation under a new id in a transaction
	// of its own (a few round trips more, only here).
	other := f.agent(t, `{"name":"Other","instructions":"Be brief."}`)
	f.chat(t, other, f.A.Key, `{"query":"hello","conversationId":"its-own"}`) // the agent cached
	var conv string
	sql, trips := st.during(func() {
		status, rep, r := f.chat(t, other, f.A.Key, `{"query":"hello","conversationId":"warm-up"}`)
		require.Equal(t, http.StatusOK, status, "%s", r.Body)
		conv = rep.ConversationID
	})
	t.Logf("another agent's conversation id: %d round trips, %d statements:\n%s", trips, len(sql), strings.Join(sql, "\n"))
	require.NotEqual(t, "warm-up", conv)
	require.LessOrEqual(t, trips, 6)
}

// Agents are cached for chat turns like keys: a change made through an
// instance takes effect there at once; an agent deleted through another
// instance, still cached here, is 404 (never a 500 from the conversation's
// foreign key).
func TestCachedAgents(t *testing.T) {
	t.Parallel()
	f := setup(t)
	other := testenv.NewOn(t, f.DBURL, testenv.WithWorkers, testenv.WithFakeModels(f.fake))
	agent := f.agent(t, `{"name":"Cached","instructions":"First instructions."}`)
	chatOn := func(e *testenv.Env, conv string) testenv.Response {
		return e.Do("POST", "/api/v2/agent/"+agent+"/chat", f.A.Key, `{"query":"hi","conversationId":"`+conv+`"}`)
	}
	system := func() string {
		reqs := f.fake.Requests()
		msgs := reqs[len(reqs)-1]["messages"].([]any)
		return msgs[0].(map[string]any)["content"].(string)
	}
	require.Equal(t, http.StatusOK, chatOn(f.Env, "c1").Status)
	require.Contains(t, system(), "First instructions.")
	require.Equal(t, http.StatusOK, chatOn(other, "c2").Status) // cached on the other instance too

	r := f.Do("PUT", "/api/agents/"+agent, f.A.Key, `{"instructions":"Second instructions."}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, http.StatusOK, chatOn(f.Env, "c1").Status)
	require.Contains(t, system(), "Second instructions.", "the instance that made the change sees it at once")

	r = f.Do("DELETE", "/api/agents/"+agent, f.A.Key, "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, http.StatusNotFound, chatOn(f.Env, "c3").Status)
	for _, conv := range []string{"c2", "c4"} { // continuing (its conversation went with the agent) and new
		r = chatOn(other, conv)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", conv, r.Body)
		require.Contains(t, string(r.Body), "not found")
	}
}
