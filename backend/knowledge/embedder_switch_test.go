package knowledge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// A run that read its datastore's embedder before the datastore switched
// to another, and read its content slowly, stops: the run the switch
// queued publishes, with the new embedder, and the old run does not
// publish the old one's vectors over it afterwards (found by a review:
// both 512-dimension embedders, the store's vectors came from two models).
func TestRunOfAReplacedEmbedderStops(t *testing.T) {
	t.Parallel()
	release, fetching := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			close(fetching)
			<-release
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><head><title>Hours</title></head><body><h1>Hours</h1><p>The shop opens at nine and closes at six, Monday to Saturday, all year long.</p></body></html>"))
	}))
	defer srv.Close()
	e := setupIngest(t, "x")
	ctx := context.Background()
	require.NoError(t, e.store.TenantTx(ctx, e.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		_, err := tx.Exec(ctx, "UPDATE datasources SET type = 'web_page', config = $1 WHERE id = $2", []byte(`{"url":"`+srv.URL+`"}`), e.ds)
		return err
	}))
	guard := netguard.New(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	k := New(e.store, embed.Lexical{}, guard, wide{})

	old := make(chan error, 1)
	go func() { old <- k.Ingest(ctx, e.org, e.ds) }() // lexical, then held in the fetch
	<-fetching
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		_, err := q.SetDatastoreEmbedder(ctx, dbq.SetDatastoreEmbedderParams{OrgID: e.org, ID: e.store_, EmbeddingModel: wide{}.Model(), EmbeddingDim: int32(wide{}.Dimension())})
		return err
	}))
	require.NoError(t, k.Ingest(ctx, e.org, e.ds)) // the switch's run
	close(release)
	require.NoError(t, <-old)

	var dims []int32
	require.NoError(t, e.store.TenantTx(ctx, e.org, func(tx pgx.Tx, _ *dbq.Queries) error {
		rows, err := tx.Query(ctx, "SELECT embedding_dim FROM chunks WHERE datasource_id = $1 AND visible", e.ds)
		if err != nil {
			return err
		}
		dims, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		return err
	}))
	require.Equal(t, []int32{int32(wide{}.Dimension())}, dims, "the visible chunks are the datastore's embedder's")
}

// twin is another embedder of the lexical one's dimension (as use-lite and
// lexical are, both 512): its vectors are the lexical ones reversed, of
// another space.
type twin struct{}

func (twin) Model() string  { return "test-twin-512" }
func (twin) Dimension() int { return embed.LexicalDim }
func (twin) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	v, err := embed.Lexical{}.Embed(ctx, texts)
	for _, x := range v {
		slices.Reverse(x)
	}
	return v, err
}

// After its datastore switched to another embedder of the same dimension,
// a datasource not yet re-embedded (its job queued, or failed for good)
// is not searched by vector: its vectors are the old model's, and compared
// with the new model's query they were ranked, and their similarity
// reported, at random. The full-text half still finds it; once re-embedded
// the vector half does too.
func TestVectorSearchSkipsAnotherEmbeddersChunks(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "Refunds are possible within thirty days of delivery, with the receipt.")
	ctx := context.Background()
	k := New(e.store, embed.Lexical{}, nil, twin{})
	require.NoError(t, k.Ingest(ctx, e.org, e.ds))
	var store dbq.Datastore
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) (err error) {
		store, err = q.SetDatastoreEmbedder(ctx, dbq.SetDatastoreEmbedderParams{OrgID: e.org, ID: e.store_, EmbeddingModel: twin{}.Model(), EmbeddingDim: int32(twin{}.Dimension())})
		return err
	}))
	search := func() (l ranked) {
		t.Helper()
		require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) (err error) {
			l, err = k.lists(ctx, q, e.org, []dbq.Datastore{store}, nil, Text("refunds within thirty days"), 10)
			return err
		}))
		return l
	}

	l := search()
	require.Len(t, l.vector, 1)
	require.Empty(t, l.vector[0], "the vector half compared the lexical embedder's vectors with the query's of another")
	require.NotEmpty(t, l.text, "the full-text half finds the datasource")

	require.NoError(t, k.Ingest(ctx, e.org, e.ds)) // the switch's run
	l = search()
	require.Len(t, l.vector, 1)
	require.NotEmpty(t, l.vector[0], "the re-embedded datasource is searched by vector")
}
