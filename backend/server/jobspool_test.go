package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// River fetches jobs on connections of its own: with every connection of
// the main pool taken (chat turns, under thousands of streams), a queued
// job is still picked up (issue 13: River's elector and producer timed out
// in a shared pool).
func TestJobsFetchedWithTheMainPoolFull(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkers, func(c *server.Config) { c.DBMaxConns = 2 })
	ctx := context.Background()

	var held []*pgxpool.Conn
	for range 2 {
		c, err := e.App.Pool.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, c)
	}
	release := func() {
		for _, c := range held {
			c.Release()
		}
		held = nil
	}
	t.Cleanup(release)

	// A job queued from outside the instance (its datasource does not
	// exist: it fails once the pool is back).
	conn, err := pgx.Connect(ctx, e.DBURL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	var id int64
	require.NoError(t, conn.QueryRow(ctx,
		`INSERT INTO river_job (kind, args, queue, state, max_attempts, priority) VALUES ('ingest_datasource', $1, 'default', 'available', 1, 1) RETURNING id`,
		map[string]any{"org_id": uuid.New(), "datasource_id": uuid.New()}).Scan(&id))

	require.Eventually(t, func() bool {
		var attempt int
		require.NoError(t, conn.QueryRow(ctx, `SELECT attempt FROM river_job WHERE id = $1`, id).Scan(&attempt))
		return attempt > 0
	}, 20*time.Second, 50*time.Millisecond, "the job is fetched while the main pool is full")
	release()
}
