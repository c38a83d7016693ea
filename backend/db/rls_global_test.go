package db_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/dbtest"
)

// globalTables are the only tables of the public schema without forced row
// level security, and why each may be: none holds one organization's data
// that another could read through it.
var globalTables = map[string]string{
	// Ids and kinds only (db.Missing's 403 or 404); ids are UUIDv7, 74
	// random bits each, made by the server.
	"resource_ids": "ids of tenant resources, nothing of their content",
	// Read and written by the SHA-256 of a cookie's token only.
	"sessions":         "console sessions, found by the hash of their token",
	"goose_db_version": "the schema's version",
}

// TestTablesWithoutRowSecurityAreGlobal: TestEveryTenantTableHasForcedRLSAndAPolicy
// finds tenant tables by their org_id column; a table that holds tenant
// data under another name (a member_id, a conversation's id) would pass it
// without row security. Every table without forced row security must be
// one of globalTables or River's (whose jobs name an organization and a row
// id, never its data, and which no tenant query reads).
func TestTablesWithoutRowSecurityAreGlobal(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
		  AND NOT (c.relrowsecurity AND c.relforcerowsecurity)`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		if strings.HasPrefix(name, "river_") {
			continue
		}
		_, ok := globalTables[name]
		require.True(t, ok, "%s has no forced row level security and is not known to be global", name)
	}
	require.NoError(t, rows.Err())

	// And no function runs with another role's rights: the app role owns
	// every table and is subject to FORCE; a SECURITY DEFINER function owned
	// by a role that bypasses RLS would answer for any organization.
	var definers []string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT coalesce(array_agg(p.proname::text), '{}') FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.prosecdef`).Scan(&definers))
	require.Empty(t, definers, "SECURITY DEFINER functions")
}
