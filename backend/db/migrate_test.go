package db_test

import (
	"context"
	"fmt"
	neturl "net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/dbtest"
)

// Instances started at once (a deployment's replicas, each with --migrate
// on by default) migrate the same empty database together: every one
// starts, the schema applied once. Each failed but one with "duplicate key
// value violates unique constraint" (goose and River took no lock).
func TestConcurrentMigrationsAllSucceed(t *testing.T) {
	t.Parallel()
	// The race is lost often, not always: a few databases make it sure.
	for round := range 3 {
		t.Run(fmt.Sprint(round), migrateTogether)
	}
}

func migrateTogether(t *testing.T) {
	url := dbtest.NewEmpty(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const instances = 4
	var wg sync.WaitGroup
	errs := make([]error, instances)
	applied := make([]int, instances)
	for i := range instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := db.Migrate(ctx, url)
			errs[i], applied[i] = err, len(res)
		}()
	}
	wg.Wait()
	total := 0
	for i, err := range errs {
		require.NoError(t, err, "instance %d", i)
		total += applied[i]
	}
	n, err := db.Pending(ctx, url)
	require.NoError(t, err)
	require.Zero(t, n)
	// Each migration was applied by one instance only.
	again, err := db.Migrate(ctx, url)
	require.NoError(t, err)
	require.Empty(t, again)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var versions int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM goose_db_version WHERE version_id > 0").Scan(&versions))
	require.Equal(t, versions, total)
}

// Pending counts River's migrations too, as Migrate applies them: with
// River's last one undone, an instance started with --migrate=false was
// ready (/readyz) with its job tables behind.
func TestPendingCountsRiversMigrations(t *testing.T) {
	t.Parallel()
	url := dbtest.NewEmpty(t)
	ctx := context.Background()
	n, err := db.Pending(ctx, url)
	require.NoError(t, err)
	require.Positive(t, n, "an empty database has everything pending")
	_, err = db.Migrate(ctx, url)
	require.NoError(t, err)
	n, err = db.Pending(ctx, url)
	require.NoError(t, err)
	require.Zero(t, n)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DELETE FROM river_migration WHERE version = (SELECT max(version) FROM river_migration)")
	require.NoError(t, err)
	n, err = db.Pending(ctx, url)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A database URL giving the pool's size (pool_max_conns, as --db-max-conns
// documents) migrates, and is read by Pending (/readyz): the migrations'
// connections sent it to Postgres as a setting, which refused it
// ("unrecognized configuration parameter").
func TestMigrateTakesAURLWithPoolParameters(t *testing.T) {
	t.Parallel()
	url := dbtest.NewEmpty(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	q := u.Query()
	q.Set("pool_max_conns", "3")
	q.Set("pool_min_conns", "0")
	u.RawQuery = q.Encode()
	withPool := u.String()

	n, err := db.Pending(ctx, withPool)
	require.NoError(t, err)
	require.Positive(t, n)
	res, err := db.Migrate(ctx, withPool)
	require.NoError(t, err)
	require.NotEmpty(t, res)
	n, err = db.Pending(ctx, withPool)
	require.NoError(t, err)
	require.Zero(t, n)
}

// A database a newer release migrated (a goose and a River migration this
// binary does not know) is this binary's to run on, as when the new
// release's `parley migrate` runs before the instances roll (docs/
// operations.md, "Upgrading"): nothing is pending (/readyz ready, jobs
// start), and Migrate applies nothing and fails on nothing, so that an
// older instance restarted meanwhile (--migrate by default) starts.
func TestNewerSchemaLetsAnOlderBinaryRun(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO river_migration (line, version) VALUES ('main', 9999)")
	require.NoError(t, err)

	n, err := db.Pending(ctx, url)
	require.NoError(t, err)
	require.Zero(t, n)
	res, err := db.Migrate(ctx, url)
	require.NoError(t, err)
	require.Empty(t, res)
}
