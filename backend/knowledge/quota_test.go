package knowledge_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

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
