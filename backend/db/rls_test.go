package db_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
)

func TestEveryTenantTableHasForcedRLSAndAPolicy(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
		       (SELECT count(*) FROM pg_policies p WHERE p.schemaname = n.nspname AND p.tablename = c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind = 'r'
		  AND (c.relname = 'organizations' OR EXISTS (
		        SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'org_id' AND NOT a.attisdropped))`)
	require.NoError(t, err)
	seen := 0
	for rows.Next() {
		var name string
		var enabled, forced bool
		var policies int
		require.NoError(t, rows.Scan(&name, &enabled, &forced, &policies))
		seen++
		require.True(t, enabled, "%s: row level security not enabled", name)
		require.True(t, forced, "%s: row level security not forced", name)
		require.Positive(t, policies, "%s: no policy", name)
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, seen, 5, "expected organizations, api_keys, agents, conversations, messages at least")
}

func TestAppRoleCannotBypassRLS(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	ctx := context.Background()
	var super, bypass bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").Scan(&super, &bypass))
	require.False(t, super, "the application role must not be a superuser")
	require.False(t, bypass, "the application role must not have BYPASSRLS")

	store := &db.Store{Pool: pool}
	org, _, err := account.Bootstrap(ctx, store, "A", "free")
	require.NoError(t, err)
	seedAgent(t, store, org)

	// With no tenant set, nothing is visible.
	for _, table := range []string{"organizations", "api_keys", "agents"} {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		require.Zero(t, n, "%s visible with no tenant set", table)
	}
	// Turning row security off is refused rather than obeyed.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET row_security = off")
	require.NoError(t, err)
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM agents").Scan(&n)
	require.Error(t, err, "row_security=off must fail for the app role, not show rows")
	_, err = conn.Exec(ctx, "RESET row_security")
	require.NoError(t, err)
	// Writing into another organization is refused by the policy's check.
	other, _, err := account.Bootstrap(ctx, store, "B", "free")
	require.NoError(t, err)
	err = store.Tenant(ctx, org, func(q *dbq.Queries) error {
		_, err := q.CreateAgent(ctx, dbq.CreateAgentParams{OrgID: other, ID: uuid.New(), Name: "x", Instructions: "y", Model: "gpt-4o", Tools: []string{}, Visibility: "private"})
		return err
	})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42501", pgErr.Code, "want a row-level security violation: %v", err)
}

func seedAgent(t *testing.T, store *db.Store, org uuid.UUID) uuid.UUID {
	t.Helper()
	id := uuid.New()
	require.NoError(t, store.Tenant(context.Background(), org, func(q *dbq.Queries) error {
		_, err := q.CreateAgent(context.Background(), dbq.CreateAgentParams{OrgID: org, ID: id, Name: "a", Instructions: "i", Model: "gpt-4o", Tools: []string{}, Visibility: "private"})
		return err
	}))
	return id
}

func TestTenantSettingDoesNotOutliveItsTransaction(t *testing.T) {
	t.Parallel()
	_, url := dbtest.NewPool(t)
	ctx := context.Background()
	pool, err := db.Open(ctx, url, 1, nil) // one connection: every transaction reuses it
	require.NoError(t, err)
	defer pool.Close()
	store := &db.Store{Pool: pool}
	orgA, _, err := account.Bootstrap(ctx, store, "A", "free")
	require.NoError(t, err)
	orgB, _, err := account.Bootstrap(ctx, store, "B", "free")
	require.NoError(t, err)
	seedAgent(t, store, orgA)

	// A request of A that fails half-way through its transaction.
	boom := errors.New("boom")
	err = store.Tenant(ctx, orgA, func(q *dbq.Queries) error {
		if _, err := q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: orgA, MaxRows: 10}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	// And one that fails on a SQL error.
	err = store.Tenant(ctx, orgA, func(q *dbq.Queries) error {
		_, err := q.GetAgent(ctx, dbq.GetAgentParams{OrgID: orgA, ID: uuid.New()})
		return err
	})
	require.ErrorIs(t, err, pgx.ErrNoRows)

	var setting *string
	require.NoError(t, pool.QueryRow(ctx, "SELECT nullif(current_setting('app.org_id', true), '')").Scan(&setting))
	require.Nil(t, setting, "A's tenant setting survived its transaction")

	// B, on the same connection, sees its own setting and none of A's rows:
	// not even when it asks for A's org_id explicitly.
	err = store.Tenant(ctx, orgB, func(q *dbq.Queries) error {
		rows, err := q.ListAgents(ctx, dbq.ListAgentsParams{OrgID: orgA, MaxRows: 10})
		require.NoError(t, err)
		require.Empty(t, rows, "B sees A's agents")
		n, err := q.CountAgents(ctx, orgA)
		require.NoError(t, err)
		require.Zero(t, n)
		return nil
	})
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", orgB.String())
	require.NoError(t, err)
	var cur string
	require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('app.org_id')").Scan(&cur))
	require.Equal(t, orgB.String(), cur)
}

// A role that row-level security does not bind is refused at start: with a
// superuser's or a BYPASSRLS role's connection every organization's rows
// are every transaction's, and nothing would say so. (The superuser here
// is the local cluster's, reached by trust as the machine's setup allows.)
func TestRoleThatBypassesRowSecurityIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := dbtest.NewPool(t)
	require.NoError(t, db.CheckRole(ctx, pool), "the app's role")

	u, err := url.Parse(dbtest.AdminURL())
	require.NoError(t, err)
	u.User = url.User("postgres")
	super, err := db.Open(ctx, u.String(), 1, nil)
	require.NoError(t, err, "the cluster's superuser, postgres, by trust on 127.0.0.1")
	t.Cleanup(super.Close)
	err = db.CheckRole(ctx, super)
	require.ErrorContains(t, err, `database role "postgres" is a superuser or has BYPASSRLS`)
}
