package knowledge

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// gate holds every embedding call until want calls have arrived: runs that
// embed at once have all passed the check made before embedding.
type gate struct {
	embed.Lexical
	want int
	mu   sync.Mutex
	n    int
	open chan struct{}
}

func (g *gate) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	g.mu.Lock()
	if g.n++; g.n == g.want {
		close(g.open)
	}
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Lexical.Embed(ctx, texts)
}

// Two documents that each fit the quota but not together, ingested at
// once: both pass the check before embedding, and the quota still holds
// when they publish. One is synced; the other fails for good, naming the
// quota, and leaves no chunk behind.
func TestKnowledgeQuotaHoldsForIngestionsAtOnce(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "")
	ctx := context.Background()
	text := longText(8)
	d := Clean(Markdown(text))
	d.Title = "t" // as Ingest names a text without a title
	pieces := len(Chunk(d, DefaultChunkOptions))
	require.Greater(t, pieces, 1)
	_, err := e.store.Pool.Exec(ctx, `ALTER TABLE plans NO FORCE ROW LEVEL SECURITY;
		UPDATE plans SET knowledge_chunks = `+fmt.Sprint(pieces*2-1)+` WHERE id = 'pro';
		ALTER TABLE plans FORCE ROW LEVEL SECURITY`)
	require.NoError(t, err)

	g := &gate{want: 2, open: make(chan struct{})}
	k := New(e.store, g, netguard.New(netguard.Config{}))
	sources := []uuid.UUID{uuid.New(), uuid.New()}
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		for _, id := range sources {
			if _, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: e.org, ID: id, DatastoreID: e.store_, Type: "text", Name: "t", Config: []byte("{}"), Content: []byte(text)}); err != nil {
				return err
			}
		}
		return nil
	}))
	errs := make([]error, len(sources))
	var wg sync.WaitGroup
	for i, id := range sources {
		wg.Go(func() { errs[i] = k.Ingest(ctx, e.org, id) })
	}
	wg.Wait()

	var failed int
	for _, err := range errs {
		if err == nil {
			continue
		}
		failed++
		msg, ok := Permanent(err)
		require.True(t, ok, "%v", err)
		require.Contains(t, msg, "its plan allows")
	}
	require.Equal(t, 1, failed, "%v", errs)
	var held, stored int64
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		_, held, err = Quota(ctx, q, e.org, nil)
		return err
	}))
	require.NoError(t, e.store.TenantTx(ctx, e.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		return tx.QueryRow(ctx, "SELECT count(*) FROM chunks WHERE org_id = $1", e.org).Scan(&stored)
	}))
	require.EqualValues(t, pieces, held)
	require.EqualValues(t, pieces, stored, "the refused run's chunks are gone")
}
