package db_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
)

// twoOrgs is a store with organizations A and B, a way to create an agent
// of org through q, and a count of org's agents read back.
type twoOrgs struct {
	store  *db.Store
	pool   *pgxpool.Pool
	url    string
	a, b   uuid.UUID
	create func(q *dbq.Queries, org, id uuid.UUID) (dbq.Agent, error)
	count  func(org uuid.UUID) int
}

func newTwoOrgs(t *testing.T) twoOrgs {
	t.Helper()
	pool, url := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	a, _, err := account.Bootstrap(ctx, store, "A", "free")
	require.NoError(t, err)
	b, _, err := account.Bootstrap(ctx, store, "B", "free")
	require.NoError(t, err)
	return twoOrgs{
		store: store, pool: pool, url: url, a: a, b: b,
		create: func(q *dbq.Queries, org, id uuid.UUID) (dbq.Agent, error) {
			return q.CreateAgent(ctx, dbq.CreateAgentParams{OrgID: org, ID: id, Name: "p", Instructions: "i", Model: "gpt-4o", Tools: []string{}, Visibility: "private"})
		},
		count: func(org uuid.UUID) int {
			var n int
			require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
				agents, err := q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: org, MaxRows: 100})
				n = len(agents)
				return err
			}))
			return n
		},
	}
}

// TenantTxWith's first statements run in the tenant's scope, in the same
// transaction as fn: their writes commit with fn's, roll back when fn
// fails, and see only the tenant's rows; a failed statement fails the
// transaction; first must run the same queries both times.
func TestTenantTxWith(t *testing.T) {
	t.Parallel()
	f := newTwoOrgs(t)
	store, pool, orgA, orgB, count := f.store, f.pool, f.a, f.b, f.count
	ctx := context.Background()
	seedAgent(t, store, orgB)
	create := func(q *dbq.Queries, id uuid.UUID) (dbq.Agent, error) { return f.create(q, orgA, id) }

	// Committed with fn; the reads see the tenant's rows only (B's agent
	// is invisible even without the org filter: row-level security).
	var made dbq.Agent
	var seen []dbq.Agent
	id := uuid.New()
	require.NoError(t, store.TenantTxWith(ctx, orgA, func(q *dbq.Queries) error {
		var err error
		if made, err = create(q, id); err != nil {
			return err
		}
		seen, err = q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: orgA, MaxRows: 100})
		return err
	}, func(tx pgx.Tx, q *dbq.Queries) error {
		var scope string
		return tx.QueryRow(ctx, "select current_setting('app.org_id')").Scan(&scope)
	}))
	require.Equal(t, id, made.ID, "the second run reads the results")
	require.Len(t, seen, 1, "the first statements see their own insert, and the tenant's rows only")
	require.Equal(t, 1, count(orgA))

	// Rolled back with fn.
	require.Error(t, store.TenantTxWith(ctx, orgA, func(q *dbq.Queries) error {
		_, err := create(q, uuid.New())
		return err
	}, func(pgx.Tx, *dbq.Queries) error { return context.Canceled }))
	require.Equal(t, 1, count(orgA))

	// A statement that fails (a duplicate id) fails the transaction.
	require.Error(t, store.TenantTxWith(ctx, orgA, func(q *dbq.Queries) error {
		_, err := create(q, id)
		return err
	}, func(pgx.Tx, *dbq.Queries) error { t.Fatal("fn ran after a failed statement"); return nil }))

	// Queries that differ between the runs are refused, nothing commits.
	runs := 0
	err := store.TenantTxWith(ctx, orgA, func(q *dbq.Queries) error {
		runs++
		if runs == 2 {
			_, err := q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: orgA, MaxRows: 100})
			return err
		}
		_, err := create(q, uuid.New())
		return err
	}, func(pgx.Tx, *dbq.Queries) error { return nil })
	require.ErrorContains(t, err, "same queries")
	require.Equal(t, 1, count(orgA))
	require.Equal(t, 1, count(orgB))

	// Afterwards the connections carry no tenant.
	for range 4 {
		var scope string
		require.NoError(t, pool.QueryRow(ctx, "select coalesce(current_setting('app.org_id', true), '')").Scan(&scope))
		require.Empty(t, scope)
	}
}

// TenantAsyncBatch and TenantBatch send BEGIN, the scope, first's
// statements and COMMIT at once: what they write commits together in the
// tenant's scope; a statement that fails (a duplicate id, another tenant's
// row) leaves nothing of the batch stored, and the connection is kept, out
// of any transaction, for the next user.
func TestTenantAsyncBatch(t *testing.T) {
	t.Parallel()
	for name, batch := range map[string]func(*db.Store) oneTrip{
		"TenantAsyncBatch": func(s *db.Store) oneTrip { return s.TenantAsyncBatch },
		"TenantBatch":      func(s *db.Store) oneTrip { return s.TenantBatch },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testOneTripBatch(t, batch)
		})
	}
}

// oneTrip is TenantAsyncBatch's and TenantBatch's signature.
type oneTrip = func(context.Context, uuid.UUID, func(*dbq.Queries) error) error

func testOneTripBatch(t *testing.T, batch func(*db.Store) oneTrip) {
	f := newTwoOrgs(t)
	store, pool, orgA, orgB, create, count := f.store, f.pool, f.a, f.b, f.create, f.count
	ctx := context.Background()
	send := batch(store)

	id := uuid.New()
	var made []dbq.Agent
	require.NoError(t, send(ctx, orgA, func(q *dbq.Queries) error {
		made = made[:0]
		for _, id := range []uuid.UUID{id, uuid.New()} {
			a, err := create(q, orgA, id)
			if err != nil {
				return err
			}
			made = append(made, a)
		}
		return nil
	}))
	require.Equal(t, id, made[0].ID, "the second run reads the results")
	require.Equal(t, 2, count(orgA))
	conns := pool.Stat().NewConnsCount()

	for name, first := range map[string]func(q *dbq.Queries) error{
		"a duplicate id after a new row": func(q *dbq.Queries) error {
			if _, err := create(q, orgA, uuid.New()); err != nil {
				return err
			}
			_, err := create(q, orgA, id)
			return err
		},
		"another tenant's row": func(q *dbq.Queries) error {
			if _, err := create(q, orgA, uuid.New()); err != nil {
				return err
			}
			_, err := create(q, orgB, uuid.New())
			return err
		},
	} {
		require.Error(t, send(ctx, orgA, first), name)
		require.Equal(t, 2, count(orgA), "%s: nothing of the batch is stored", name)
		require.Zero(t, count(orgB), name)
	}

	// A first that runs other queries the second time is refused; unlike
	// TenantTxWith's, its recorded statements have committed by then (the
	// COMMIT travelled with them).
	runs := 0
	err := send(ctx, orgA, func(q *dbq.Queries) error {
		runs++
		if runs == 2 {
			_, err := q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: orgA, MaxRows: 100})
			return err
		}
		_, err := create(q, orgA, uuid.New())
		return err
	})
	require.ErrorContains(t, err, "same queries")

	require.Equal(t, conns, pool.Stat().NewConnsCount(), "a failed batch's connection is rolled back and kept")
	for range 4 {
		var scope string
		require.NoError(t, pool.QueryRow(ctx, "select coalesce(current_setting('app.org_id', true), '')").Scan(&scope))
		require.Empty(t, scope)
	}
}
