package migrations_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/migrations"
)

// TestEveryMigrationGoesDownAndUpAgain: the whole schema goes down to
// nothing, every Down in turn, and up again to the same tables with their
// row security.
func TestEveryMigrationGoesDownAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx, sqldb, p := provider(t)

	tables := func() (n int) {
		require.NoError(t, sqldb.QueryRowContext(ctx, `
			SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relforcerowsecurity`).Scan(&n))
		return n
	}
	_, err := p.Up(ctx)
	require.NoError(t, err)
	want := tables()
	require.Positive(t, want)

	_, err = p.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, tables())
	var leftover int
	require.NoError(t, sqldb.QueryRowContext(ctx, `
		SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.proname LIKE 'parley%'`).Scan(&leftover))
	require.Zero(t, leftover, "functions left by the Down migrations")

	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, want, tables())
}

// provider is goose's provider of the migrations over an empty database of
// the test's, with the context (two minutes) to run them in.
func provider(t *testing.T) (context.Context, *sql.DB, *goose.Provider) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cfg, err := pgx.ParseConfig(dbtest.NewEmpty(t))
	require.NoError(t, err)
	sqldb := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { sqldb.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, sqldb, migrations.FS)
	require.NoError(t, err)
	return ctx, sqldb, p
}
