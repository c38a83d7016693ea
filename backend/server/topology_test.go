package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sse "github.com/tmaxmax/go-sse"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// The deployment of docs/scaling.md and compose.yaml, in process: two API
// instances that run no jobs (--workers 0) and one worker (parley worker:
// jobs only, no HTTP), on one database and one Redis. Rate limits count
// exactly across the API instances, each ingestion is done once and by the
// worker only, and a conversation's live events reach a stream on either
// instance whichever one wrote them.
func TestTopologyTwoAPIInstancesAndOneWorker(t *testing.T) {
	t.Parallel()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "parley-test:" + hex.EncodeToString(b[:])
	fake := testenv.NewFakeProvider(t)
	apiOnly := func(c *server.Config) { c.Workers = 0 }
	one := testenv.New(t, testenv.WithWorkers, withRedis(prefix), testenv.WithFakeModels(fake), apiOnly)
	two := testenv.NewOn(t, one.DBURL, testenv.WithWorkers, withRedis(prefix), testenv.WithFakeModels(fake), apiOnly)
	ctx := context.Background()

	t.Run("rate limits are exact across the API instances", func(t *testing.T) {
		free := one.Bootstrap("Free", "free") // 10 requests a minute
		require.Equal(t, map[int]int{200: 10, 429: 8}, restBurst(t, 18, free.Key, one, two))
		for _, e := range []*testenv.Env{one, two} {
			r := e.Do("GET", "/api/agents", free.Key, nil)
			require.Equal(t, http.StatusTooManyRequests, r.Status)
			require.Equal(t, "RATE_LIMIT_EXCEEDED", r.Err(t).Error.Code)
		}
	})

	t.Run("each ingestion is done once, by the worker", func(t *testing.T) {
		org := one.A
		r := one.Do("POST", "/api/datastores", org.Key, `{"name":"Handbook"}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var store struct{ ID string }
		r.JSON(t, &store)
		var ids []string
		for i := range 6 {
			e := []*testenv.Env{one, two}[i%2] // through both instances
			var text strings.Builder
			for p := range 12 {
				fmt.Fprintf(&text, "Section %d of document %d explains the travel policy in enough words to make a chunk of its own.\n\n", p, i)
			}
			r := e.Do("POST", "/api/datastores/"+store.ID+"/datasources", org.Key,
				map[string]any{"type": "text", "name": fmt.Sprintf("doc-%d.md", i), "text": text.String()})
			require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
			var ds struct{ ID, Status string }
			r.JSON(t, &ds)
			require.Equal(t, "pending", ds.Status)
			ids = append(ids, ds.ID)
		}

		type jobRow struct {
			state       string
			attempt     int
			attemptedBy []string
		}
		jobs := func() map[string][]jobRow {
			rows, err := one.App.Pool.Query(ctx,
				"SELECT args->>'datasource_id', state::text, attempt, coalesce(attempted_by, '{}') FROM river_job WHERE kind = 'ingest_datasource'")
			require.NoError(t, err)
			out := map[string][]jobRow{}
			for rows.Next() {
				var ds string
				var j jobRow
				require.NoError(t, rows.Scan(&ds, &j.state, &j.attempt, &j.attemptedBy))
				out[ds] = append(out[ds], j)
			}
			require.NoError(t, rows.Err())
			return out
		}
		// Queued once each; the API instances leave them alone.
		require.Never(t, func() bool {
			for _, js := range jobs() {
				for _, j := range js {
					if j.attempt > 0 || j.state != "available" {
						return true
					}
				}
			}
			return false
		}, 1500*time.Millisecond, 100*time.Millisecond, "an API instance with --workers 0 ran a job")
		queued := jobs()
		require.Len(t, queued, len(ids))
		for _, id := range ids {
			require.Len(t, queued[id], 1, "one job for %s", id)
		}

		// The worker: what `parley worker` runs (no HTTP).
		worker, err := server.New(ctx, server.Config{DatabaseURL: one.DBURL, Workers: 2, ShutdownTimeout: 5 * time.Second, LastUsedFlush: time.Hour})
		require.NoError(t, err)
		wctx, stop := context.WithCancel(ctx)
		worked := make(chan error, 1)
		go func() { worked <- worker.RunWorkers(wctx) }()
		t.Cleanup(func() {
			stop()
			require.NoError(t, <-worked)
			worker.Close()
		})

		// Read in the database: the organization's ingestions run one at a
		// time on a worker of two (jobs.IngestWorker.PerOrg), longer than
		// the API's rate limit would let this poll it.
		require.Eventually(t, func() bool {
			for _, id := range ids {
				var ds dbq.GetDatasourceRow
				require.NoError(t, one.App.Store.Tenant(ctx, org.ID, func(q *dbq.Queries) (err error) {
					ds, err = q.GetDatasource(ctx, dbq.GetDatasourceParams{OrgID: org.ID, ID: uuid.MustParse(id)})
					return err
				}))
				require.NotEqual(t, "error", ds.Status, ds.Error)
				if ds.Status != "synced" {
					return false
				}
			}
			// River records a job's completion shortly after it returns.
			for _, js := range jobs() {
				for _, j := range js {
					if j.state != "completed" {
						return false
					}
				}
			}
			return true
		}, 60*time.Second, 100*time.Millisecond)

		done := jobs()
		require.Len(t, done, len(ids))
		for _, id := range ids {
			require.Len(t, done[id], 1, "one job for %s", id)
			j := done[id][0]
			require.Equal(t, "completed", j.state, id)
			require.Equal(t, 1, j.attempt, "%s was run once", id)
			// (A job waiting its turn among its organization's, snoozed,
			// is picked up again: by the same client.)
			require.Len(t, slices.Compact(j.attemptedBy), 1, "%s was run by one client", id)
		}
		// One ingestion's chunks each, none twice.
		require.NoError(t, one.App.Store.TenantTx(ctx, org.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
			for _, id := range ids {
				var total, visible, positions int
				require.NoError(t, tx.QueryRow(ctx,
					"SELECT count(*), count(*) FILTER (WHERE visible), count(DISTINCT position) FROM chunks WHERE datasource_id = $1",
					uuid.MustParse(id)).Scan(&total, &visible, &positions))
				require.Positive(t, total, id)
				require.Equal(t, total, visible, "%s: no chunks left from a second run", id)
				require.Equal(t, total, positions, "%s: each chunk once", id)
			}
			return nil
		}))
		// And the datastore answers from them on either instance.
		for _, e := range []*testenv.Env{one, two} {
			r := e.Do("POST", "/api/datastores/"+store.ID+"/query", org.Key, `{"query":"travel policy of document 3","topK":3}`)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			var res struct{ Results []struct{ Source string } }
			r.JSON(t, &res)
			require.NotEmpty(t, res.Results)
		}
	})

	t.Run("live events reach either instance", func(t *testing.T) {
		org := one.B
		r := one.Do("POST", "/api/agents", org.Key, `{"name":"Support","instructions":"Help."}`)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var ag struct{ ID string }
		r.JSON(t, &ag)
		r = two.Do("POST", "/api/v2/agent/"+ag.ID+"/chat", org.Key, `{"query":"Where is my order?","conversationId":"topo-1"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

		onOne := followEvents(t, one.URL, "/api/v2/conversations/topo-1/events", org.Key)
		onTwo := followEvents(t, two.URL, "/api/v2/conversations/topo-1/events", org.Key)
		for i, writer := range []*testenv.Env{one, two} {
			text := fmt.Sprintf("A person's reply number %d.", i+1)
			r := writer.Do("POST", "/api/v2/conversations/topo-1/messages", org.Key, map[string]string{"text": text})
			require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
			for _, s := range []*eventStream{onOne, onTwo} {
				s.waitHumanMessage(t, text)
			}
		}
	})
}

// eventStream follows a conversation's SSE events with a real SSE parser.
type eventStream struct{ c chan sse.Event }

func followEvents(t *testing.T, base, path, key string) *eventStream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &eventStream{c: make(chan sse.Event, 64)}
	go func() {
		defer close(s.c)
		for ev, err := range sse.Read(resp.Body, nil) {
			if err != nil {
				return
			}
			if ev.Data == "" {
				continue // the opening's id: EventSource fires no event for a block without data
			}
			s.c <- ev
		}
	}()
	return s
}

// waitHumanMessage reads events until a person's message with text (the
// status change that comes before it is skipped). The bound is under the
// 15 s heartbeat, at which streams read again anyway: the event must come
// from the database's notification.
func (s *eventStream) waitHumanMessage(t *testing.T, text string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.c:
			require.True(t, ok, "the stream ended")
			var m struct {
				Type    string
				Message struct{ Role, Text string }
			}
			require.NoError(t, json.Unmarshal([]byte(ev.Data), &m), ev.Data)
			if m.Type == "message" {
				require.Equal(t, "human", m.Message.Role)
				require.Equal(t, text, m.Message.Text)
				return
			}
		case <-timeout:
			t.Fatalf("no message %q within 10 s", text)
		}
	}
}
