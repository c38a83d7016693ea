package knowledge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"mime/multipart"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// tiny is a cheap embedder (words hashed into 16 buckets): these tests are
// about the ingestion pipeline, not retrieval quality, and must stay fast
// under the race detector.
type tiny struct{}

func (tiny) Model() string  { return "test-tiny-16" }
func (tiny) Dimension() int { return 16 }
func (tiny) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, 16)
		for _, w := range strings.Fields(strings.ToLower(t)) {
			h := fnv.New32a()
			h.Write([]byte(w))
			v[h.Sum32()%16]++
		}
		var n float64
		for _, x := range v {
			n += float64(x * x)
		}
		for j := range v {
			v[j] /= float32(math.Sqrt(n) + 1e-9)
		}
		out[i] = v
	}
	return out, nil
}

// settledWithin is settled with a deadline of its own.
func (f kfix) settledWithin(t *testing.T, key, id string, d time.Duration) datasource {
	t.Helper()
	var ds datasource
	require.Eventually(t, func() bool {
		r := f.Do("GET", "/api/datasources/"+id, key, nil)
		if r.Status != http.StatusOK {
			return false
		}
		r.JSON(t, &ds)
		return ds.Status == "synced" || ds.Status == "error"
	}, d, 250*time.Millisecond, "datasource %s did not settle", id)
	return ds
}

// The ingestion pipeline at its limits, on one instance: a document of the
// largest size an upload allows, and datasources deleted while they ingest.
func TestIngestionAtItsLimits(t *testing.T) {
	t.Parallel()
	// Enterprise limits: the polling below must not be rate limited.
	f := kfix{testenv.New(t, testenv.WithWorkers, func(c *server.Config) { c.Embedder = tiny{} })}
	ent := f.Bootstrap("Big", "enterprise")

	// A 20 MiB Markdown file uploaded like any other: it ingests whole, in
	// one attempt, although it takes far longer than River's default
	// one-minute job timeout would allow under the race detector.
	t.Run("20 MiB document", func(t *testing.T) {
		t.Parallel()
		store := f.datastore(t, ent.Key, "Manual")
		var doc bytes.Buffer
		// Sections of six paragraphs, about a chunk each, as a manual has
		// (a heading every paragraph made 92,000 chunks of 230 bytes).
		for i := 0; doc.Len() < knowledge.MaxFileBytes-(64<<10); i++ {
			if i%6 == 0 {
				fmt.Fprintf(&doc, "## Section %d\n\n", i/6)
			}
			fmt.Fprintf(&doc, "Paragraph %d describes part %d of the machine in enough words to make a paragraph of ordinary length. ", i, i)
			doc.WriteString("It goes on to explain how the part is fitted, cleaned and replaced, and what to do when it wears out.\n\n")
		}
		doc.WriteString("## Lighthouse\n\nThe lighthouse keeper's passphrase is amber falcon seventeen.\n")
		require.LessOrEqual(t, doc.Len(), knowledge.MaxFileBytes)
		require.Greater(t, doc.Len(), 19<<20)

		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, err := mw.CreateFormFile("file", "manual.md")
		require.NoError(t, err)
		_, err = fw.Write(doc.Bytes())
		require.NoError(t, err)
		require.NoError(t, mw.Close())
		resp := f.Post("/api/datastores/"+store+"/datasources", map[string]string{"Authorization": "Bearer " + ent.Key, "Content-Type": mw.FormDataContentType()}, body.String())
		defer resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		var up datasource
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&up))

		ds := f.settledWithin(t, ent.Key, up.ID, 8*time.Minute)
		require.Equal(t, "synced", ds.Status, ds.Error)
		require.Greater(t, ds.ChunkCount, 10000, "chunks")
		t.Logf("%d chunks", ds.ChunkCount)

		// Its last chunk is stored and visible. (Checked in the database:
		// vector search needs an index of the embedder's dimension, and this
		// cheap one has none; building an HNSW graph of 17,000 vectors would
		// take minutes of the suite.)
		var last int
		require.NoError(t, f.tenant(ent.ID, func(tx pgx.Tx) error {
			return tx.QueryRow(context.Background(),
				"SELECT count(*) FROM chunks WHERE datasource_id = $1 AND visible AND text LIKE '%amber falcon seventeen%'", up.ID).Scan(&last)
		}))
		require.Equal(t, 1, last, "the end of the document was not ingested")

		var attempts int
		require.NoError(t, f.App.Pool.QueryRow(context.Background(),
			"SELECT attempt FROM river_job WHERE kind = 'ingest_datasource' AND args->>'datasource_id' = $1", up.ID).Scan(&attempts))
		require.Equal(t, 1, attempts, "the document needed retries")
	})

	// Over Connect, in its JSON (the file in base64) or binary form, a file
	// past the 1 MiB other services' messages are held to is taken as over
	// REST (it was refused as resource_exhausted, a 429).
	t.Run("a large file over Connect", func(t *testing.T) {
		t.Parallel()
		store := f.datastore(t, ent.Key, "Connect")
		doc := bytes.Repeat([]byte("A paragraph of the handbook, in words a reader would use.\n\n"), (3<<20)/58)
		for _, p := range []struct {
			hc  *http.Client
			opt connect.ClientOption
		}{{http.DefaultClient, connect.WithProtoJSON()}, {testenv.H2C(), connect.WithGRPC()}} {
			c := parleyv1connect.NewDatastoreServiceClient(p.hc, f.URL, p.opt, connect.WithInterceptors(testenv.Bearer(ent.Key)))
			resp, err := c.CreateDatasource(context.Background(), &parleyv1.CreateDatasourceRequest{DatastoreId: store, Type: "file", File: doc, FileName: "handbook.txt"})
			require.NoError(t, err)
			require.NotEmpty(t, resp.GetDatasource().GetId())
		}
	})

	// Deleting a datasource while it is being ingested or re-ingested never
	// fails (it used to deadlock about one time in four) and leaves nothing.
	t.Run("delete while ingesting", func(t *testing.T) {
		t.Parallel()
		store := f.datastore(t, ent.Key, "Churn")
		var text strings.Builder
		for i := range 400 {
			fmt.Fprintf(&text, "Paragraph %d of the churned document, long enough to be a chunk of its own after a while.\n\n", i)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var ids []string
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ds := f.source(t, ent.Key, store, map[string]any{"type": "text", "name": fmt.Sprintf("doc-%d", i), "text": text.String()})
				mu.Lock()
				ids = append(ids, ds.ID)
				mu.Unlock()
				// Let ingestion start, then resync (a second run) and delete.
				time.Sleep(time.Duration(i*40) * time.Millisecond)
				if i%2 == 0 {
					r := f.Do("POST", "/api/datasources/"+ds.ID+"/resync", ent.Key, nil)
					if r.Status != http.StatusAccepted {
						t.Errorf("resync: %d %s", r.Status, r.Body)
					}
					time.Sleep(30 * time.Millisecond)
				}
				r := f.Do("DELETE", "/api/datasources/"+ds.ID, ent.Key, nil)
				if r.Status != http.StatusOK {
					t.Errorf("delete: %d %s", r.Status, r.Body)
				}
				if r := f.Do("GET", "/api/datasources/"+ds.ID, ent.Key, nil); r.Status != http.StatusNotFound {
					t.Errorf("read after delete: %d %s", r.Status, r.Body)
				}
			}()
		}
		wg.Wait()
		// Jobs still running find their datasource gone and end without
		// writing anything back.
		require.Eventually(t, func() bool {
			var running int
			require.NoError(t, f.App.Pool.QueryRow(context.Background(),
				"SELECT count(*) FROM river_job WHERE kind = 'ingest_datasource' AND state IN ('available', 'running', 'retryable') AND args->>'datasource_id' = ANY($1)", ids).Scan(&running))
			return running == 0
		}, 3*time.Minute, 100*time.Millisecond, "a generous bound: twelve documents' runs under the race detector on a busy machine passed one minute once")
		r := f.Do("GET", "/api/datastores/"+store+"/datasources", ent.Key, nil)
		require.Equal(t, http.StatusOK, r.Status)
		require.NotContains(t, string(r.Body), "doc-")
		var manual int
		require.NoError(t, f.tenant(ent.ID, func(tx pgx.Tx) error {
			return tx.QueryRow(context.Background(), "SELECT count(*) FROM chunks c JOIN datastores d ON d.id = c.datastore_id WHERE d.name = 'Churn'").Scan(&manual)
		}))
		require.Zero(t, manual, "chunks of deleted datasources remain")
	})
}

// tenant runs fn in a transaction of org's tenant.
func (f kfix) tenant(org uuid.UUID, fn func(tx pgx.Tx) error) error {
	ctx := context.Background()
	return pgx.BeginFunc(ctx, f.App.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", org.String()); err != nil {
			return err
		}
		return fn(tx)
	})
}
