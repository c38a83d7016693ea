package knowledge

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// A datastore deleted while its datasources are ingested again: each run
// either publishes before the deletion or finds its datasource gone, never
// a deadlock. The deletion takes the datastore, then its datasources; a
// run took its datasource, then publishing wrote the datastore's text
// stats and postings, whose keys were checked against the datastore only
// then, while the deletion waited for the datasource.
func TestDeleteDatastoreRacesIngestion(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "")
	ctx := context.Background()
	k := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	text := longText(40)
	const iterations = 40
	for i := range iterations {
		store := uuid.New()
		sources := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
		require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
			if _, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{OrgID: e.org, ID: store, Name: fmt.Sprint("s", i), EmbeddingModel: embed.Lexical{}.Model(), EmbeddingDim: embed.LexicalDim}); err != nil {
				return err
			}
			for _, id := range sources {
				if _, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: e.org, ID: id, DatastoreID: store, Type: "text", Name: "t", Config: []byte("{}"), Content: []byte(text)}); err != nil {
					return err
				}
			}
			return nil
		}))
		for _, id := range sources {
			require.NoError(t, k.Ingest(ctx, e.org, id))
		}

		// Each run publishes a new generation, which hides the previous
		// one's chunks; the deletion lands somewhere among them.
		start := make(chan struct{})
		errs := make([]error, len(sources)+1)
		var wg sync.WaitGroup
		for n, id := range sources {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[n] = k.Ingest(ctx, e.org, id)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[len(sources)] = e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
				_, err := q.DeleteDatastore(ctx, dbq.DeleteDatastoreParams{OrgID: e.org, ID: store})
				return err
			})
		}()
		close(start)
		wg.Wait()
		for n, err := range errs {
			require.NoError(t, err, "iteration %d, %d", i, n)
		}
	}
}

// A turn reads its agent's datastores in one transaction and searches
// them in a later one: a datastore deleted in between finds nothing, and
// the others are still searched (reading it again was a 500, "no rows in
// result set").
func TestSearchOfADatastoreDeletedSinceItWasRead(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "The shop opens at nine in the morning and closes at six in the evening.")
	ctx := context.Background()
	k := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}))
	require.NoError(t, k.Ingest(ctx, e.org, e.ds))
	var stores []dbq.Datastore
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		gone, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{OrgID: e.org, ID: uuid.New(), Name: "gone", EmbeddingModel: embed.Lexical{}.Model(), EmbeddingDim: embed.LexicalDim})
		if err != nil {
			return err
		}
		kept, err := q.GetDatastore(ctx, dbq.GetDatastoreParams{OrgID: e.org, ID: e.store_})
		stores = []dbq.Datastore{gone, kept}
		return err
	}))
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		_, err := q.DeleteDatastore(ctx, dbq.DeleteDatastoreParams{OrgID: e.org, ID: stores[0].ID})
		return err
	}))
	query, err := k.EmbedQuery(ctx, stores, "when does the shop open")
	require.NoError(t, err)
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		found, err := k.Search(ctx, q, e.org, stores, nil, query, 5)
		require.NoError(t, err)
		require.NotEmpty(t, found, "the remaining datastore is searched")
		for _, r := range found {
			require.NotEqual(t, stores[0].ID, r.DatasourceID)
		}
		found, err = k.Search(ctx, q, e.org, stores[:1], nil, query, 5)
		require.NoError(t, err)
		require.Empty(t, found, "the deleted datastore holds nothing")
		return nil
	}))
}
