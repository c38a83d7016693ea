package dbtest

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
)

// A pooled database a test wrote into comes back exactly as the template
// is: every table's rows (the seeded plans, goose's and River's versions
// included, though a test changed or removed them) and every sequence.
func TestResetGivesBackTheTemplate(t *testing.T) {
	ctx := context.Background()
	u := New(t)
	name := dbName(t, u)
	pool, err := db.Open(ctx, u, 2, nil)
	require.NoError(t, err)
	defer pool.Close()
	for _, org := range []string{"One", "Two"} {
		_, _, err := account.Bootstrap(ctx, &db.Store{Pool: pool}, org, "pro")
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `
		ALTER TABLE plans NO FORCE ROW LEVEL SECURITY;
		UPDATE plans SET requests_per_minute = 1;
		ALTER TABLE plans FORCE ROW LEVEL SECURITY;
		DELETE FROM river_migration;
		INSERT INTO goose_db_version (version_id, is_applied) VALUES (999, true);
		SELECT nextval('river_job_id_seq')`)
	require.NoError(t, err)
	// An emptied table that VACUUM cut back to no page still gets its seed.
	_, err = pool.Exec(ctx, "VACUUM river_migration")
	require.NoError(t, err)
	var size int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_relation_size('river_migration')").Scan(&size))
	require.Zero(t, size)
	// A table grown past 1 MiB is truncated, not left full of dead rows.
	_, err = pool.Exec(ctx, `INSERT INTO river_job (kind, args, max_attempts, state)
		SELECT 'bulk', jsonb_build_object('pad', repeat('x', 500)), 1, 'available' FROM generate_series(1, 5000)`)
	require.NoError(t, err)
	require.NotEqual(t, snapshot(t, AdminURL(), templateName(t)), snapshot(t, AdminURL(), name), "the test's writes changed nothing")
	pool.Close()

	claim, err := pgx.Connect(ctx, AdminURL())
	require.NoError(t, err)
	defer claim.Close(ctx)
	process.Lock()
	err = reset(ctx, claim, name)
	process.Unlock()
	require.NoError(t, err)
	require.Equal(t, snapshot(t, AdminURL(), templateName(t)), snapshot(t, AdminURL(), name))
	conn, err := pgx.Connect(ctx, withDB(AdminURL(), name))
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_relation_size('river_job')").Scan(&size))
	require.Zero(t, size, "river_job was deleted from, not truncated")
}

// A database whose schema a test changed is not emptied but refused (and
// then dropped and cloned again by claimPooled).
func TestResetRefusesAChangedSchema(t *testing.T) {
	ctx := context.Background()
	u := New(t)
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE INDEX scratch ON plans (requests_per_minute)")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	claim, err := pgx.Connect(ctx, AdminURL())
	require.NoError(t, err)
	defer claim.Close(ctx)
	process.Lock()
	defer process.Unlock()
	require.ErrorIs(t, reset(ctx, claim, dbName(t, u)), errSchemaChanged)
}

func dbName(t *testing.T, u string) string {
	p, err := url.Parse(u)
	require.NoError(t, err)
	return strings.TrimPrefix(p.Path, "/")
}

// snapshot is every public table's rows and every public sequence's state
// in the database name, as text.
func snapshot(t *testing.T, admin, name string) map[string]string {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, withDB(admin, name))
	require.NoError(t, err)
	defer conn.Close(ctx)
	tables, err := conn.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(tables, pgx.RowTo[string])
	require.NoError(t, err)
	// The owner reads past the forced policies of its tenant tables only in
	// a transaction that lifts them and is rolled back.
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	out := map[string]string{}
	for _, table := range names {
		_, err := tx.Exec(ctx, "ALTER TABLE public."+pgx.Identifier{table}.Sanitize()+" NO FORCE ROW LEVEL SECURITY")
		require.NoError(t, err)
		var rows string
		err = tx.QueryRow(ctx, "SELECT coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '') FROM public."+pgx.Identifier{table}.Sanitize()+" t").Scan(&rows)
		require.NoError(t, err, table)
		out[table] = rows
	}
	var seqs string
	require.NoError(t, tx.QueryRow(ctx, `SELECT string_agg(sequencename || '=' || coalesce(last_value::text, 'unset'), ',' ORDER BY sequencename)
		FROM pg_sequences WHERE schemaname = 'public'`).Scan(&seqs))
	out["sequences"] = seqs
	return out
}

// Tests of one process that hold databases at once (parallel tests, or a
// test and its subtests) get one each, though one session holds every
// claim (its advisory locks would be taken again, not refused).
func TestHeldDatabasesAreNotClaimedAgain(t *testing.T) {
	seen := map[string]bool{}
	var claim func(t *testing.T, depth int)
	claim = func(t *testing.T, depth int) {
		seen[dbName(t, New(t))] = true
		if depth < 3 {
			t.Run(strconv.Itoa(depth), func(t *testing.T) { claim(t, depth+1) })
		}
	}
	claim(t, 0)
	require.Len(t, seen, 4)
}
