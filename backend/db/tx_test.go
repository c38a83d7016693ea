package db_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
)

// Pooled connections killed under the service (a restarted or failed-over
// Postgres): the next transactions start on fresh connections; a request
// is never a 500, at worst a 503 UNAVAILABLE.
func TestKilledConnectionsAreRetriedOrUnavailable(t *testing.T) {
	t.Parallel()
	pool, url := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	listPlans := func(q *dbq.Queries) error {
		_, err := q.ListPlans(ctx)
		return err
	}
	for name, read := range map[string]func() error{
		"Tenant": func() error { return store.Tenant(ctx, uuid.New(), listPlans) },
		"TenantTxWith (pipelined)": func() error {
			return store.TenantTxWith(ctx, uuid.New(), listPlans, func(pgx.Tx, *dbq.Queries) error { return nil })
		},
		"TenantAsyncBatch (one round trip)": func() error { return store.TenantAsyncBatch(ctx, uuid.New(), listPlans) },
	} {
		// Warm the pool: several connections, used just now.
		for range 8 {
			require.NoError(t, read(), name)
		}
		for round := range 3 {
			killer, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			tag, err := killer.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
			require.NoError(t, err)
			require.NoError(t, killer.Close(ctx))
			require.Positive(t, tag.RowsAffected(), "%s, round %d killed nothing", name, round)
			var ok, unavailable int
			for range 8 {
				err := read()
				switch {
				case err == nil:
					ok++
				case apperr.CodeOf(err) == apperr.Unavailable:
					unavailable++
				default:
					t.Fatalf("%s, round %d: a killed connection surfaced as %v", name, round, err)
				}
			}
			require.Positive(t, ok, "%s, round %d: nothing recovered", name, round)
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// A transaction's settings ride on its BEGIN as string literals: whatever a
// value holds (quotes, backslashes, an injection attempt), Postgres reads it
// back unchanged, and a NUL is refused before anything is sent.
func TestScopesAreLiterals(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	ctx := context.Background()
	for _, v := range []string{
		"plain@example.com", `o'brien@example.com`, `back\slash\'@example.com`, `x', true); drop table members; --`,
		`E'\\'`, "ünïcödé@example.com", "",
	} {
		q, err := db.BeginQuery([]db.Scope{{Name: "app.member_email", Value: v}, {Name: "synchronous_commit", Value: "off"}})
		require.NoError(t, err)
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: q})
		require.NoError(t, err, v)
		var got, sync string
		require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('app.member_email'), current_setting('synchronous_commit')").Scan(&got, &sync))
		require.Equal(t, v, got)
		require.Equal(t, "off", sync)
		require.NoError(t, tx.Rollback(ctx))
	}
	var members int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'members'").Scan(&members))
	require.Equal(t, 1, members)
	_, err := db.BeginQuery([]db.Scope{{Name: "app.member_email", Value: "a\x00b"}})
	require.Error(t, err)
}

// Store.orgGone recognises a write for a deleted organization by the name of
// the foreign key it breaks: every reference to organizations must be named
// <table>_org_id_fkey, and no other constraint may end so.
func TestOrganizationForeignKeysAreNamed(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	rows, err := pool.Query(context.Background(), `SELECT conname, conrelid::regclass::text, confrelid::regclass::text,
		(SELECT array_agg(a.attname::text) FROM pg_attribute a WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey))
		FROM pg_constraint c WHERE contype = 'f' AND connamespace = 'public'::regnamespace`)
	require.NoError(t, err)
	defer rows.Close()
	toOrgs := 0
	for rows.Next() {
		var name, table, refs string
		var cols []string
		require.NoError(t, rows.Scan(&name, &table, &refs, &cols))
		if refs == "organizations" {
			toOrgs++
			require.Equal(t, table+"_org_id_fkey", name, "a reference to organizations")
			require.Equal(t, []string{"org_id"}, cols)
		} else {
			require.False(t, strings.HasSuffix(name, "_org_id_fkey"), "%s on %s references %s, not organizations", name, table, refs)
		}
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, toOrgs, 7, "the tenant tables reference organizations")
}
