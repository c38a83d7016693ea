package migrations_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestIngestResumeDropsDuplicateChunks: migration 00004 makes a chunk's
// place in a run unique, keeping one of the chunks stored twice before; it
// runs as the app role, which owns chunks and is held to their forced row
// security, so with no tenant set its DELETE must still see every row.
func TestIngestResumeDropsDuplicateChunks(t *testing.T) {
	t.Parallel()
	ctx, sqldb, p := provider(t)
	_, err := p.UpTo(ctx, 3)
	require.NoError(t, err)

	// Two organizations' datasources, each with one place stored twice, as
	// a resumed run of 00003's ingestion could leave them.
	for range 2 {
		org, store, source := uuid.New(), uuid.New(), uuid.New()
		tx, err := sqldb.BeginTx(ctx, nil)
		require.NoError(t, err)
		for _, stmt := range []struct {
			sql  string
			args []any
		}{
			{"SELECT set_config('app.org_id', $1, true)", []any{org.String()}},
			{"INSERT INTO organizations (id, name, plan) VALUES ($1, 'o', 'free')", []any{org}},
			{"INSERT INTO datastores (org_id, id, name, embedding_model, embedding_dim) VALUES ($1, $2, 's', 'm', 3)", []any{org, store}},
			{"INSERT INTO datasources (org_id, id, datastore_id, type, name) VALUES ($1, $2, $3, 'text', 'd')", []any{org, source, store}},
			{`INSERT INTO chunks (org_id, id, datastore_id, datasource_id, generation, position, text, tokens, embedding, embedding_dim)
			  SELECT $1, gen_random_uuid(), $2, $3, 1, 0, 't', 1, '[1,2,3]', 3 FROM generate_series(1, 2)`, []any{org, store, source}},
		} {
			_, err := tx.ExecContext(ctx, stmt.sql, stmt.args...)
			require.NoError(t, err, stmt.sql)
		}
		require.NoError(t, tx.Commit())
	}

	_, err = p.UpTo(ctx, 4)
	require.NoError(t, err, "00004 must remove the duplicates before its unique index")

	// Counted with row security lifted, as the migration must see them.
	_, err = sqldb.ExecContext(ctx, "ALTER TABLE chunks NO FORCE ROW LEVEL SECURITY")
	require.NoError(t, err)
	var n int
	require.NoError(t, sqldb.QueryRowContext(ctx, "SELECT count(*) FROM chunks").Scan(&n))
	require.Equal(t, 2, n, "one chunk per place of each datasource")
}
