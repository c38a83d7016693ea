package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/testenv"
)

// concurrently runs the requests at once (after a barrier) and returns
// their statuses and bodies.
func concurrently(e *testenv.Env, key string, reqs ...[3]any) ([]int, []string) {
	statuses, bodies := make([]int, len(reqs)), make([]string, len(reqs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for n, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp := e.Do(r[0].(string), r[1].(string), key, r[2])
			statuses[n], bodies[n] = resp.Status, string(resp.Body)
		}()
	}
	close(start)
	wg.Wait()
	return statuses, bodies
}

func createAgent(t *testing.T, e *testenv.Env, key string, body map[string]any) string {
	t.Helper()
	r := e.Do("POST", "/api/agents", key, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a struct{ ID string }
	r.JSON(t, &a)
	return a.ID
}

// An agent deleted while chat turns carrying a contact continue its
// conversations: a turn either lands before the deletion or finds the agent
// gone (404), never a deadlock. The deletion takes the agent, then its
// conversations; a turn touched its conversation (the contact), then its
// question's insert wrote the conversation again, checking the agent's key
// only then, while the deletion waited for the conversation.
func TestDeleteAgentRacesContactTurns(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithFakeModels(fake))
	org := e.Bootstrap("Race", "enterprise")
	ctx := context.Background()
	const iterations = 50
	for i := range iterations {
		id := createAgent(t, e, org.Key, map[string]any{"name": "Racer", "instructions": "Answer.", "model": "gpt-4o-mini"})
		agent := uuid.MustParse(id)
		convs := []string{fmt.Sprintf("a-%d", i), fmt.Sprintf("b-%d", i)}
		require.NoError(t, e.App.Store.Tenant(ctx, org.ID, func(q *dbq.Queries) error {
			for _, c := range convs {
				if _, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: org.ID, ID: c, AgentID: agent, Channel: "api"}); err != nil {
					return err
				}
			}
			return nil
		}))
		reqs := [][3]any{{"DELETE", "/api/agents/" + id, nil}}
		for n, c := range convs {
			reqs = append(reqs, [3]any{"POST", "/api/v2/agent/" + id + "/chat", map[string]any{
				"query": "hello", "conversationId": c, "contact": map[string]any{"email": fmt.Sprintf("v%d-%d@example.com", i, n)},
			}})
		}
		statuses, bodies := concurrently(e, org.Key, reqs...)
		require.Equal(t, http.StatusOK, statuses[0], "iteration %d: the deletion: %s", i, bodies[0])
		for n := 1; n < len(statuses); n++ {
			if statuses[n] != http.StatusOK {
				require.Equal(t, http.StatusNotFound, statuses[n], "iteration %d, turn %d: %s", i, n, bodies[n])
			}
		}
	}
}

// A datastore deleted while agents are given it: the update either lands
// first (and the deletion then removes the link) or says the datastore is
// not found, never a deadlock. The deletion takes the datastore, then the
// agents' links; setDatastores cleared the agent's links (one of them to
// that datastore), then checked the datastore's key when it linked it
// again.
func TestDeleteDatastoreRacesAgentDatastores(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	org := e.Bootstrap("Race", "enterprise")
	const iterations = 60
	for i := range iterations {
		stores := make([]string, 2)
		for n := range stores {
			r := e.Do("POST", "/api/datastores", org.Key, map[string]any{"name": fmt.Sprintf("s%d-%d", i, n)})
			require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
			var d struct{ ID string }
			r.JSON(t, &d)
			stores[n] = d.ID
		}
		agents := []string{
			createAgent(t, e, org.Key, map[string]any{"name": "A", "instructions": "Answer.", "datastores": stores}),
			createAgent(t, e, org.Key, map[string]any{"name": "B", "instructions": "Answer.", "datastores": stores}),
		}
		statuses, bodies := concurrently(e, org.Key,
			[3]any{"DELETE", "/api/datastores/" + stores[0], nil},
			[3]any{"PUT", "/api/agents/" + agents[0], map[string]any{"datastores": []string{stores[1], stores[0]}}},
			[3]any{"PUT", "/api/agents/" + agents[1], map[string]any{"datastores": stores}},
		)
		require.Equal(t, http.StatusOK, statuses[0], "iteration %d: the deletion: %s", i, bodies[0])
		for n := 1; n < len(statuses); n++ {
			if statuses[n] != http.StatusOK {
				require.Equal(t, http.StatusNotFound, statuses[n], "iteration %d, update %d: %s", i, n, bodies[n])
				require.Equal(t, fmt.Sprintf("datastore %q not found", stores[0]), errMessage(t, bodies[n]))
			}
		}
	}
}

// An agent given a datastore whose deletion is under way waits for it and
// is told that datastore is not found (not a foreign-key failure of its
// link), and keeps the datastores it had.
func TestAgentGivenADatastoreBeingDeleted(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	mk := func(name string) string {
		r := e.Do("POST", "/api/datastores", e.A.Key, map[string]any{"name": name})
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var d struct{ ID string }
		r.JSON(t, &d)
		return d.ID
	}
	kept, doomed := mk("kept"), mk("doomed")
	agent := createAgent(t, e, e.A.Key, map[string]any{"name": "A", "instructions": "Answer.", "datastores": []string{kept}})

	// The deletion, begun and not yet committed.
	tx, err := e.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
	require.NoError(t, err)
	n, err := dbq.New(tx).DeleteDatastore(ctx, dbq.DeleteDatastoreParams{OrgID: e.A.ID, ID: uuid.MustParse(doomed)})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	done := make(chan struct{})
	var status int
	var body string
	go func() {
		defer close(done)
		r := e.Do("PUT", "/api/agents/"+agent, e.A.Key, map[string]any{"datastores": []string{kept, doomed}})
		status, body = r.Status, string(r.Body)
	}()
	waitBlocked(t, e, "datastores")
	require.NoError(t, tx.Commit(ctx))
	<-done
	require.Equal(t, http.StatusNotFound, status, "%s", body)
	require.Equal(t, fmt.Sprintf("datastore %q not found", doomed), errMessage(t, body))

	r := e.Do("GET", "/api/agents/"+agent, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var got struct{ Datastores []string }
	r.JSON(t, &got)
	require.Equal(t, []string{kept}, got.Datastores)
}

// errMessage is a REST error body's message.
func errMessage(t *testing.T, body string) string {
	t.Helper()
	var b struct{ Error struct{ Message string } }
	require.NoError(t, json.Unmarshal([]byte(body), &b), "%s", body)
	return b.Error.Message
}

// waitBlocked waits until a statement of the instance's naming table waits
// for a lock (for another transaction).
func waitBlocked(t *testing.T, e *testenv.Env, table string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := e.App.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, table).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 10*time.Millisecond, "no statement on %s waits for a lock", table)
}
