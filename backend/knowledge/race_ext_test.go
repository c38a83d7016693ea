package knowledge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/testenv"
)

// beginDelete deletes a datastore of org in a transaction it leaves open:
// a deletion under way. The caller commits it.
func beginDelete(t *testing.T, e *testenv.Env, org uuid.UUID, store string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := e.App.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", org.String())
	require.NoError(t, err)
	n, err := dbq.New(tx).DeleteDatastore(ctx, dbq.DeleteDatastoreParams{OrgID: org, ID: uuid.MustParse(store)})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	return tx
}

// duringDelete sends a request while store's deletion is under way, and
// commits the deletion once the request waits for a lock (for it).
func duringDelete(t *testing.T, e *testenv.Env, store, method, path string, body any) testenv.Response {
	t.Helper()
	tx := beginDelete(t, e, e.A.ID, store)
	done := make(chan testenv.Response)
	go func() { done <- e.Do(method, path, e.A.Key, body) }()
	dbtest.WaitForLockWait(t, e.App.Pool, "")
	require.NoError(t, tx.Commit(context.Background()))
	return <-done
}

// A datastore renamed while it is being deleted: the update waits for the
// deletion, then finds no row to update: the datastore is not found (it
// was a 500, "no rows in result set").
func TestUpdateDatastoreBeingDeleted(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t)}
	store := f.datastore(t, f.A.Key, "doomed")
	r := duringDelete(t, f.Env, store, "PATCH", "/api/datastores/"+store, map[string]any{"name": "renamed"})
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	require.Equal(t, fmt.Sprintf("datastore %q not found", store), r.Err(t).Error.Message)
}

// A datasource added to a datastore being deleted: its read of the
// datastore (FOR KEY SHARE) waits for the deletion, then finds it missing:
// the datastore is not found, and no datasource or job is left.
func TestCreateDatasourceInDatastoreBeingDeleted(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t)}
	store := f.datastore(t, f.A.Key, "doomed")
	r := duringDelete(t, f.Env, store, "POST", "/api/datastores/"+store+"/datasources",
		map[string]any{"type": "text", "name": "t", "text": "Some text."})
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	require.Equal(t, fmt.Sprintf("datastore %q not found", store), r.Err(t).Error.Message)
}

// A datastore deleted by two requests at once: the second waits for the
// first, then finds nothing to delete: 404, not a second 200.
func TestDeleteDatastoreBeingDeleted(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t)}
	store := f.datastore(t, f.A.Key, "doomed")
	r := duringDelete(t, f.Env, store, "DELETE", "/api/datastores/"+store, nil)
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	require.Equal(t, fmt.Sprintf("datastore %q not found", store), r.Err(t).Error.Message)

	// So is a datasource: the second deletion is 404 (it was a 200).
	kept := f.datastore(t, f.A.Key, "kept")
	ds := f.source(t, f.A.Key, kept, map[string]any{"type": "text", "text": "Deleted twice at once."})
	ctx := context.Background()
	tx, err := f.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.A.ID.String())
	require.NoError(t, err)
	n, err := dbq.New(tx).DeleteDatasource(ctx, dbq.DeleteDatasourceParams{OrgID: f.A.ID, ID: uuid.MustParse(ds.ID)})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	second := make(chan testenv.Response)
	go func() { second <- f.Do("DELETE", "/api/datasources/"+ds.ID, f.A.Key, nil) }()
	dbtest.WaitForLockWait(t, f.App.Pool, "")
	require.NoError(t, tx.Commit(ctx))
	r = <-second
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)

	// An update naming nothing to change is refused, as every update's.
	for _, body := range []any{map[string]any{}, json.RawMessage("null")} {
		r = f.Do("PATCH", "/api/datastores/"+kept, f.A.Key, body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
		require.Contains(t, r.Err(t).Error.Message, "names no field to update")
	}
}

// A datasource resynced while it is deleted: the resync waits for the
// deletion, then finds it missing: 404, and no ingestion is queued. It
// updated no row and answered 202 with the datasource as read before, its
// job queued for a datasource that no longer exists; so in a datastore
// being deleted.
func TestResyncDatasourceBeingDeleted(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t)}
	ctx := context.Background()
	queued := func(id string) int {
		var n int
		require.NoError(t, f.App.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'ingest_datasource' AND args->>'datasource_id' = $1", id).Scan(&n))
		return n
	}

	store := f.datastore(t, f.A.Key, "kept")
	ds := f.source(t, f.A.Key, store, map[string]any{"type": "text", "text": "Resynced while deleted."})
	tx, err := f.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.A.ID.String())
	require.NoError(t, err)
	n, err := dbq.New(tx).DeleteDatasource(ctx, dbq.DeleteDatasourceParams{OrgID: f.A.ID, ID: uuid.MustParse(ds.ID)})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	resync := make(chan testenv.Response)
	go func() { resync <- f.Do("POST", "/api/datasources/"+ds.ID+"/resync", f.A.Key, nil) }()
	dbtest.WaitForLockWait(t, f.App.Pool, "")
	require.NoError(t, tx.Commit(ctx))
	r := <-resync
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	require.Equal(t, fmt.Sprintf("datasource %q not found", ds.ID), r.Err(t).Error.Message)
	require.Equal(t, 1, queued(ds.ID), "only the creation's ingestion")

	doomed := f.datastore(t, f.A.Key, "doomed")
	ds = f.source(t, f.A.Key, doomed, map[string]any{"type": "text", "text": "Resynced while its datastore is deleted."})
	r = duringDelete(t, f.Env, doomed, "POST", "/api/datasources/"+ds.ID+"/resync", nil)
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	require.Equal(t, fmt.Sprintf("datasource %q not found", ds.ID), r.Err(t).Error.Message)
	require.Equal(t, 1, queued(ds.ID), "only the creation's ingestion")
}
