package knowledge_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/testenv"
)

// An organization holds at most its plan's chunks of knowledge, all its
// datastores together: a document that would take it past them fails
// before it is embedded, naming the quota; one at the quota adds nothing
// (422); a resync replaces its own chunks; another organization is not
// concerned.
func TestKnowledgeQuota(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	f := kfix{testenv.NewOn(t, url, testenv.WithWorkers)}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `ALTER TABLE plans NO FORCE ROW LEVEL SECURITY;
		UPDATE plans SET knowledge_chunks = 3 WHERE id = 'pro';
		ALTER TABLE plans FORCE ROW LEVEL SECURITY`)
	require.NoError(t, err)

	store := f.datastore(t, f.A.Key, "A")
	one := f.source(t, f.A.Key, store, map[string]any{"type": "text", "name": "one", "text": "The shop opens at nine."})
	require.Equal(t, 1, f.settled(t, f.A.Key, one.ID).ChunkCount)
	long := strings.Repeat("Every appliance comes with a two year warranty covering parts and labour. ", 60)
	big := f.source(t, f.A.Key, store, map[string]any{"type": "text", "name": "big", "text": long})
	got := f.settled(t, f.A.Key, big.ID)
	require.Equal(t, "error", got.Status)
	require.Contains(t, got.Error, "the organization's datastores hold 1 of the 3 its plan allows")
	require.Zero(t, got.ChunkCount)

	for _, name := range []string{"two", "three"} {
		s := f.source(t, f.A.Key, store, map[string]any{"type": "text", "name": name, "text": "Parcels arrive in " + name + " days."})
		require.Equal(t, "synced", f.settled(t, f.A.Key, s.ID).Status)
	}
	r := f.Do("POST", "/api/datastores/"+store+"/datasources", f.A.Key, map[string]any{"type": "text", "text": "more"})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	require.Equal(t, "FAILED_PRECONDITION", r.Err(t).Error.Code)
	require.Contains(t, r.Err(t).Error.Message, "hold 3 chunks, all its plan allows (3)")

	// Above a quota lowered under it: by how much.
	_, err = conn.Exec(ctx, `ALTER TABLE plans NO FORCE ROW LEVEL SECURITY;
		UPDATE plans SET knowledge_chunks = 2 WHERE id = 'pro';
		ALTER TABLE plans FORCE ROW LEVEL SECURITY`)
	require.NoError(t, err)
	r = f.Do("POST", "/api/datastores/"+store+"/datasources", f.A.Key, map[string]any{"type": "text", "text": "more"})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	require.Contains(t, r.Err(t).Error.Message, "hold 3 chunks, 1 more than the 2 its plan allows")
	_, err = conn.Exec(ctx, `ALTER TABLE plans NO FORCE ROW LEVEL SECURITY;
		UPDATE plans SET knowledge_chunks = 3 WHERE id = 'pro';
		ALTER TABLE plans FORCE ROW LEVEL SECURITY`)
	require.NoError(t, err)

	// At the quota, a resync replaces the datasource's own chunk.
	r = f.Do("POST", "/api/datasources/"+one.ID+"/resync", f.A.Key, nil)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	require.Equal(t, "synced", f.settled(t, f.A.Key, one.ID).Status)

	// B's quota is its own.
	storeB := f.datastore(t, f.B.Key, "B")
	b := f.source(t, f.B.Key, storeB, map[string]any{"type": "text", "text": "B's words."})
	require.Equal(t, "synced", f.settled(t, f.B.Key, b.ID).Status)

	// What datasources keep of their uploads and texts is bounded too,
	// StoredBytesPerChunk for each chunk the plan allows (12 KiB here):
	// a text whose ingestion fails (past the chunk quota) keeps its bytes,
	// and filled the disk at no cost in chunks.
	bound := 3 * knowledge.StoredBytesPerChunk
	huge := f.source(t, f.B.Key, storeB, map[string]any{"type": "text", "name": "huge", "text": strings.Repeat("word ", (bound-100)/5)})
	require.Equal(t, "error", f.settled(t, f.B.Key, huge.ID).Status)
	r = f.Do("POST", "/api/datastores/"+storeB+"/datasources", f.B.Key, map[string]any{"type": "text", "text": strings.Repeat("x", 200)})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s", r.Body)
	require.Contains(t, r.Err(t).Error.Message, "200 more would pass the 12288 its plan allows")
	r = f.Do("DELETE", "/api/datasources/"+huge.ID, f.B.Key, nil)
	require.Less(t, r.Status, 300, "%s", r.Body)
	small := f.source(t, f.B.Key, storeB, map[string]any{"type": "text", "text": strings.Repeat("x", 200)})
	require.Equal(t, "synced", f.settled(t, f.B.Key, small.ID).Status)
}

// Texts added at once, each within the bytes the plan lets datasources
// keep but not all together: the bound holds (each creation reads what is
// kept as the others left it). The creations are held after their check,
// at their ingestion's enqueueing, until all have passed or wait for it:
// each had read the bytes kept before any other committed, and all were
// kept, past the bound by as many uploads as were sent at once.
func TestStoredBytesBoundHoldsForCreationsAtOnce(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	f := kfix{testenv.NewOn(t, url)}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `ALTER TABLE plans NO FORCE ROW LEVEL SECURITY;
		UPDATE plans SET knowledge_chunks = 3 WHERE id = 'pro';
		ALTER TABLE plans FORCE ROW LEVEL SECURITY`)
	require.NoError(t, err)
	store := f.datastore(t, f.A.Key, "A")

	// 3 * StoredBytesPerChunk (12,288) holds three of these, not four.
	const sent, size, fit = 6, 4000, 3
	hold, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer hold.Rollback(ctx) //nolint:errcheck
	_, err = hold.Exec(ctx, "LOCK TABLE river_job IN SHARE MODE")
	require.NoError(t, err)

	resps := make([]testenv.Response, sent)
	var wg sync.WaitGroup
	for i := range sent {
		wg.Go(func() {
			resps[i] = f.Do("POST", "/api/datastores/"+store+"/datasources", f.A.Key,
				map[string]any{"type": "text", "name": fmt.Sprint("t", i), "text": strings.Repeat("x", size)})
		})
	}
	waitForLockWaits(t, f.App.Pool, sent)
	require.NoError(t, hold.Commit(ctx))
	wg.Wait()

	created := 0
	for i, r := range resps {
		if r.Status == http.StatusCreated {
			created++
			continue
		}
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "request %d: %s", i, r.Body)
		require.Contains(t, r.Err(t).Error.Message, "would pass the 12288 its plan allows")
	}
	require.Equal(t, fit, created)
	require.NoError(t, f.App.Store.Tenant(ctx, f.A.ID, func(q *dbq.Queries) error {
		quota, err := q.KnowledgeQuota(ctx, dbq.KnowledgeQuotaParams{OrgID: f.A.ID})
		require.EqualValues(t, fit*size, quota.Stored)
		return err
	}))
}

// waitForLockWaits waits up to 20 s until n statements of pool's database
// wait for a lock, and fails the test if fewer do.
func waitForLockWaits(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got)
		require.NoError(t, err)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statements wait for a lock after 20 s, not %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
