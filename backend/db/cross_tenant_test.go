package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// TestPublicAgentQueryReadsPublicAgentsOnly: GetPublicAgent says in its own
// WHERE that the agent is public, as every tenant query names its org_id:
// run where row security shows a private agent (its organization's
// transaction), it still finds none. The public_agent policy is the second
// wall, not the only one.
func TestPublicAgentQueryReadsPublicAgentsOnly(t *testing.T) {
	t.Parallel()
	f := newTwoOrgs(t)
	ctx := context.Background()
	private := seedAgent(t, f.store, f.a)
	public := uuid.New()
	require.NoError(t, f.store.Tenant(ctx, f.a, func(q *dbq.Queries) error {
		_, err := q.CreateAgent(ctx, dbq.CreateAgentParams{OrgID: f.a, ID: public, Name: "p", Instructions: "i", Model: "gpt-4o", Tools: []string{}, Visibility: "public"})
		return err
	}))

	require.NoError(t, f.store.Tenant(ctx, f.a, func(q *dbq.Queries) error {
		_, err := q.GetPublicAgent(ctx, private)
		require.ErrorIs(t, err, pgx.ErrNoRows, "a private agent read as a public one")
		row, err := q.GetPublicAgent(ctx, public)
		require.NoError(t, err)
		require.Equal(t, f.a, row.OrgID)
		return nil
	}))
	// The visitor's way in: the public agent alone, not the private one.
	for id, want := range map[uuid.UUID]bool{private: false, public: true} {
		require.NoError(t, f.store.PublicAgent(ctx, id, func(q *dbq.Queries) error {
			_, err := q.GetPublicAgent(ctx, id)
			if want {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, pgx.ErrNoRows)
			}
			agents, err := q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: f.a, MaxRows: 10})
			require.NoError(t, err)
			for _, a := range agents {
				require.Equal(t, public, a.ID, "a visitor's transaction sees another of the organization's agents")
			}
			return nil
		}))
	}
}

// TestTenantReachesNoOtherOrganization: B's transaction, naming A's rows by
// A's org_id and ids, reads, changes and deletes none of them, and a
// scoped transaction that is not a tenant's (a visitor's, a key's, a
// non-operator naming itself operator) reads none either.
func TestTenantReachesNoOtherOrganization(t *testing.T) {
	t.Parallel()
	f := newTwoOrgs(t)
	ctx := context.Background()
	agent := seedAgent(t, f.store, f.a)

	require.NoError(t, f.store.Tenant(ctx, f.b, func(q *dbq.Queries) error {
		_, err := q.GetAgent(ctx, dbq.GetAgentParams{OrgID: f.a, ID: agent})
		require.ErrorIs(t, err, pgx.ErrNoRows)
		name := "taken"
		_, err = q.UpdateAgent(ctx, dbq.UpdateAgentParams{OrgID: f.a, ID: agent, Name: &name})
		require.ErrorIs(t, err, pgx.ErrNoRows)
		n, err := q.DeleteAgent(ctx, dbq.DeleteAgentParams{OrgID: f.a, ID: agent})
		require.NoError(t, err)
		require.Zero(t, n)
		keys, err := q.ListAPIKeys(ctx, f.a)
		require.NoError(t, err)
		require.Empty(t, keys)
		_, err = q.GetOrganization(ctx, f.a)
		require.ErrorIs(t, err, pgx.ErrNoRows)
		return nil
	}))
	require.Equal(t, 1, f.count(f.a), "B's transaction changed A's agent")

	scopes := map[string]func(fn func(q *dbq.Queries) error) error{
		"public agent": func(fn func(q *dbq.Queries) error) error { return f.store.PublicAgent(ctx, agent, fn) },
		"public form":  func(fn func(q *dbq.Queries) error) error { return f.store.PublicForm(ctx, agent, fn) },
		"key":          func(fn func(q *dbq.Queries) error) error { return f.store.KeyHolder(ctx, make([]byte, 32), fn) },
		"operator":     func(fn func(q *dbq.Queries) error) error { return f.store.Operator(ctx, uuid.New(), fn) },
	}
	for name, scope := range scopes {
		require.NoError(t, scope(func(q *dbq.Queries) error {
			ok, err := q.IsOperator(ctx)
			require.NoError(t, err)
			require.False(t, ok, name)
			orgs, err := q.OperatorOrganizations(ctx, time.Time{})
			require.NoError(t, err)
			require.Empty(t, orgs, "%s: organizations visible", name)
			agents, err := q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: f.a, MaxRows: 10})
			require.NoError(t, err)
			require.Empty(t, agents, "%s: agents visible", name)
			keys, err := q.ListAPIKeys(ctx, f.a)
			require.NoError(t, err)
			require.Empty(t, keys, "%s: keys visible", name)
			return nil
		}), name)
	}
}

// TestBatchAndPanicLeaveNoTenantBehind: on a pool of one connection, A's
// one-trip batch that fails in SQL, and A's transaction whose fn panics,
// leave the connection with no organization set; B's next transaction on it
// sees none of A's rows.
func TestBatchAndPanicLeaveNoTenantBehind(t *testing.T) {
	t.Parallel()
	f := newTwoOrgs(t)
	ctx := context.Background()
	seedAgent(t, f.store, f.a)
	pool, err := db.Open(ctx, f.url, 1, nil)
	require.NoError(t, err)
	defer pool.Close()
	store := &db.Store{Pool: pool}

	leftBehind := func() {
		t.Helper()
		var setting *string
		require.NoError(t, pool.QueryRow(ctx, "SELECT nullif(current_setting('app.org_id', true), '')").Scan(&setting))
		require.Nil(t, setting, "A's tenant setting survived its transaction")
		require.NoError(t, store.Tenant(ctx, f.b, func(q *dbq.Queries) error {
			agents, err := q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: f.a, MaxRows: 10})
			require.NoError(t, err)
			require.Empty(t, agents, "B sees A's agents")
			return nil
		}))
	}

	for _, batch := range []func(context.Context, uuid.UUID, func(q *dbq.Queries) error) error{store.TenantBatch, store.TenantAsyncBatch} {
		err := batch(ctx, f.a, func(q *dbq.Queries) error {
			if _, err := q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: f.a, MaxRows: 10}); err != nil {
				return err
			}
			// Another organization's agent: refused by the policy's check.
			_, err := f.create(q, f.b, uuid.New())
			return err
		})
		require.Error(t, err)
		leftBehind()
	}

	require.Panics(t, func() {
		_ = store.TenantTx(ctx, f.a, func(_ pgx.Tx, q *dbq.Queries) error {
			if _, err := q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: f.a, MaxRows: 10}); err != nil {
				return err
			}
			panic("boom")
		})
	})
	leftBehind()

	cancelled, cancel := context.WithCancel(ctx)
	err = store.Tenant(cancelled, f.a, func(q *dbq.Queries) error {
		if _, err := q.ListAgents(cancelled, dbq.ListAgentsParams{OrgID: f.a, MaxRows: 10}); err != nil {
			return err
		}
		cancel()
		_, err := q.ListAgents(cancelled, dbq.ListAgentsParams{OrgID: f.a, MaxRows: 10})
		return err
	})
	require.Error(t, err)
	leftBehind()
}
