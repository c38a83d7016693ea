package knowledge

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/embed"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/netguard"
)

// wide is a second embedder of another dimension: the lexical features
// spread over 768 buckets.
type wide struct{}

func (wide) Model() string  { return "test-wide-768" }
func (wide) Dimension() int { return 768 }
func (wide) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	v, _ := embed.Lexical{}.Embed(ctx, texts)
	out := make([][]float32, len(v))
	for i, x := range v {
		out[i] = append(append([]float32{}, x...), make([]float32, 256)...)
	}
	return out, nil
}

// riverEnqueuer enqueues ingestion as backend/jobs does (which this
// package's tests cannot import: it imports knowledge).
type riverEnqueuer struct{ c *river.Client[pgx.Tx] }

type ingestArgs struct {
	OrgID        uuid.UUID `json:"org_id"`
	DatasourceID uuid.UUID `json:"datasource_id"`
}

func (ingestArgs) Kind() string { return "ingest_datasource" }

func (r riverEnqueuer) EnqueueIngest(ctx context.Context, tx pgx.Tx, job IngestJob) error {
	_, err := r.c.InsertTx(ctx, tx, ingestArgs{OrgID: job.OrgID, DatasourceID: job.DatasourceID}, nil)
	return err
}

// EnqueueForget: nothing here deletes a datasource.
func (r riverEnqueuer) EnqueueForget(context.Context, pgx.Tx, ForgetJob) error { return nil }

// Changing a datastore's embedder re-embeds its datasources.
func TestChangingTheEmbedderReembeds(t *testing.T) {
	t.Parallel()
	e := setupIngest(t, "Refunds are possible within thirty days of delivery.")
	ctx := context.Background()
	k := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}), wide{})
	require.NoError(t, k.Ingest(ctx, e.org, e.ds))
	jobs, err := river.NewClient(riverpgxv5.New(e.store.Pool), &river.Config{})
	require.NoError(t, err)
	svc := &Service{K: k, Jobs: riverEnqueuer{jobs}}
	actx := auth.WithPrincipal(ctx, &auth.Principal{OrgID: e.org, Scopes: []string{"admin"}})

	model := "nope"
	_, err = svc.UpdateDatastore(actx, &parleyv1.UpdateDatastoreRequest{Id: e.store_.String(), EmbeddingModel: &model})
	require.ErrorContains(t, err, "not a configured embedder")

	model = wide{}.Model()
	resp, err := svc.UpdateDatastore(actx, &parleyv1.UpdateDatastoreRequest{Id: e.store_.String(), EmbeddingModel: &model})
	require.NoError(t, err)
	require.Equal(t, model, resp.GetDatastore().GetEmbeddingModel())
	require.EqualValues(t, 768, resp.GetDatastore().GetEmbeddingDimension())

	var status string
	var jobCount int
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		d, err := q.GetDatasource(ctx, dbq.GetDatasourceParams{OrgID: e.org, ID: e.ds})
		status = d.Status
		if err != nil {
			return err
		}
		return e.store.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'ingest_datasource'").Scan(&jobCount)
	}))
	require.Equal(t, "pending", status)
	require.Equal(t, 1, jobCount, "one re-embedding job per datasource")

	// The job runs: chunks now carry the new embedder's vectors, and search uses them.
	require.NoError(t, k.Ingest(ctx, e.org, e.ds))
	require.NoError(t, pgx.BeginFunc(ctx, e.store.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.org.String()); err != nil {
			return err
		}
		var dims []int32
		rows, err := tx.Query(ctx, "SELECT DISTINCT embedding_dim FROM chunks WHERE datasource_id = $1", e.ds)
		if err != nil {
			return err
		}
		dims, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		require.Equal(t, []int32{768}, dims)
		return err
	}))
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		d, err := q.GetDatastore(ctx, dbq.GetDatastoreParams{OrgID: e.org, ID: e.store_})
		if err != nil {
			return err
		}
		rs, err := k.Search(ctx, q, e.org, []dbq.Datastore{d}, []uuid.UUID{}, Text("refund within thirty days"), 3)
		require.NotEmpty(t, rs)
		require.Contains(t, rs[0].Text, "thirty days")
		return err
	}))
}

// padded is the lexical embedder's vector padded with zeros to dim: an
// embedder of each dimension that has an index.
type padded int

func (p padded) Model() string  { return fmt.Sprintf("test-padded-%d", int(p)) }
func (p padded) Dimension() int { return int(p) }
func (p padded) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	v, _ := embed.Lexical{}.Embed(ctx, texts)
	out := make([][]float32, len(v))
	for i, x := range v {
		out[i] = append(append([]float32{}, x...), make([]float32, int(p)-len(x))...)
	}
	return out, nil
}

// Each dimension's vector query finds the chunk on both of its paths, the
// exact scan and the HNSW index.
func TestVectorSearchEachDimension(t *testing.T) {
	t.Parallel()
	for _, dim := range []padded{512, 768, 1536} {
		t.Run(dim.Model(), func(t *testing.T) {
			t.Parallel()
			e := setupIngest(t, "Refunds are possible within thirty days of delivery.")
			ctx := context.Background()
			k := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}), dim)
			var stores []dbq.Datastore
			require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
				_, err := q.SetDatastoreEmbedder(ctx, dbq.SetDatastoreEmbedderParams{OrgID: e.org, ID: e.store_, EmbeddingModel: dim.Model(), EmbeddingDim: int32(dim)})
				return err
			}))
			require.NoError(t, k.Ingest(ctx, e.org, e.ds))
			require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
				var err error
				stores, err = q.ListDatastores(ctx, e.org)
				return err
			}))
			for _, path := range []struct {
				name                 string
				exactBelow, exactMax int64
			}{{"exact", 1 << 40, 0}, {"hnsw", -1, 0}} {
				k.ExactBelow, k.ExactMax = path.exactBelow, path.exactMax
				var found []Result
				require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
					l, err := k.lists(ctx, q, e.org, stores, nil, Text("refunds within thirty days"), 10)
					if len(l.vector) == 1 {
						found = l.vector[0]
					}
					return err
				}), path.name)
				require.Len(t, found, 1, "%s: the vector half found no chunk", path.name)
				require.Contains(t, found[0].Text, "thirty days", path.name)
				require.Greater(t, found[0].Similarity, 0.3, path.name)
			}
		})
	}
}

// A datasource added while its datastore's embedder is switched: the switch
// waits for the addition to commit and re-embeds it too. It was not listed
// (the addition's read of the datastore did not hold the switch up), and
// its run, having read the old embedder, stopped once the switch committed
// with no run after it: the datasource stayed running for good.
func TestEmbedderSwitchWaitsForADatasourceBeingAdded(t *testing.T) {
	t.Parallel()
	e, svc, actx := switchSetup(t)
	ctx := context.Background()

	// The addition, under way: CreateDatasource's statements, uncommitted.
	added := uuid.New()
	tx, err := e.store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.org.String())
	require.NoError(t, err)
	q := dbq.New(tx)
	_, err = q.KeyShareDatastore(ctx, dbq.KeyShareDatastoreParams{OrgID: e.org, ID: e.store_})
	require.NoError(t, err)
	_, err = q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: e.org, ID: added, DatastoreID: e.store_, Type: "text", Name: "added", Config: []byte("{}"), Content: []byte("Shipping takes three days.")})
	require.NoError(t, err)

	model := wide{}.Model()
	done := make(chan error, 1)
	go func() {
		_, err := svc.UpdateDatastore(actx, &parleyv1.UpdateDatastoreRequest{Id: e.store_.String(), EmbeddingModel: &model})
		done <- err
	}()
	dbtest.WaitForLockWait(t, e.store.Pool, "")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done)

	var status string
	var queued int
	require.NoError(t, e.store.Tenant(ctx, e.org, func(q *dbq.Queries) error {
		d, err := q.GetDatasource(ctx, dbq.GetDatasourceParams{OrgID: e.org, ID: added})
		if err != nil {
			return err
		}
		status = d.Status
		return e.store.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'ingest_datasource' AND args->>'datasource_id' = $1", added.String()).Scan(&queued)
	}))
	require.Equal(t, "pending", status)
	require.Equal(t, 1, queued, "the switch queued the added datasource's re-embedding")
}

// Two switches of a datastore's embedder at once, and a datasource being
// added: the second switch read the datastore before the first committed,
// found it already on the embedder it asks for and took no lock, then
// switched it back once the first committed, without waiting for the
// addition (the lock of TestEmbedderSwitchWaitsForADatasourceBeingAdded):
// the added datasource was not re-embedded, and stayed running for good.
// The switch now waits for the addition and queues its run.
func TestEmbedderSwitchBackWaitsForADatasourceBeingAdded(t *testing.T) {
	t.Parallel()
	e, svc, actx := switchSetup(t)
	ctx := context.Background()
	begin := func() (pgx.Tx, *dbq.Queries) {
		t.Helper()
		tx, err := e.store.Pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.org.String())
		require.NoError(t, err)
		return tx, dbq.New(tx)
	}

	// The addition, under way: CreateDatasource's statements, uncommitted.
	adding, q := begin()
	var addingPID int32
	require.NoError(t, adding.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&addingPID))
	added := uuid.New()
	_, err := q.KeyShareDatastore(ctx, dbq.KeyShareDatastoreParams{OrgID: e.org, ID: e.store_})
	require.NoError(t, err)
	_, err = q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: e.org, ID: added, DatastoreID: e.store_, Type: "text", Name: "added", Config: []byte("{}"), Content: []byte("Shipping takes three days.")})
	require.NoError(t, err)

	// A first switch, to wide, under way.
	first, q := begin()
	_, err = q.SetDatastoreEmbedder(ctx, dbq.SetDatastoreEmbedderParams{OrgID: e.org, ID: e.store_, EmbeddingModel: wide{}.Model(), EmbeddingDim: int32(wide{}.Dimension())})
	require.NoError(t, err)

	// The second, back to lexical, reads the datastore as lexical.
	model := embed.Lexical{}.Model()
	done := make(chan error, 1)
	go func() {
		_, err := svc.UpdateDatastore(actx, &parleyv1.UpdateDatastoreRequest{Id: e.store_.String(), EmbeddingModel: &model})
		done <- err
	}()
	dbtest.WaitForLockWait(t, e.store.Pool, "")
	require.NoError(t, first.Commit(ctx))

	// The second switch either ends or waits for the addition.
	var switched error
	ended := false
	for finished := false; !finished; {
		select {
		case switched = <-done:
			finished, ended = true, true
		default:
			var n int
			require.NoError(t, e.store.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))", addingPID).Scan(&n))
			if finished = n > 0; !finished {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	require.NoError(t, adding.Commit(ctx))
	if !ended {
		switched = <-done
	}
	require.NoError(t, switched)

	var queued int
	require.NoError(t, e.store.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'ingest_datasource' AND args->>'datasource_id' = $1", added.String()).Scan(&queued))
	require.Equal(t, 1, queued, "the switch back queued the added datasource's re-embedding")
}

// switchSetup is a datastore of one datasource, the service that switches
// its embedder (its runs queued, not worked), and an admin's context.
func switchSetup(t *testing.T) (kenv, *Service, context.Context) {
	e := setupIngest(t, "Refunds are possible within thirty days of delivery.")
	k := New(e.store, embed.Lexical{}, netguard.New(netguard.Config{}), wide{})
	jobs, err := river.NewClient(riverpgxv5.New(e.store.Pool), &river.Config{})
	require.NoError(t, err)
	actx := auth.WithPrincipal(context.Background(), &auth.Principal{OrgID: e.org, Scopes: []string{"admin"}})
	return e, &Service{K: k, Jobs: riverEnqueuer{jobs}}, actx
}
