package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/tool"
)

// concurrently runs the requests at once (after a barrier) and returns
// their statuses and bodies.
func concurrently(e *testenv.Env, key string, reqs ...[3]any) []testenv.Response {
	resps := make([]testenv.Response, len(reqs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for n, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resps[n] = e.Do(r[0].(string), r[1].(string), key, r[2])
		}()
	}
	close(start)
	wg.Wait()
	return resps
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
		resps := concurrently(e, org.Key, reqs...)
		require.Equal(t, http.StatusOK, resps[0].Status, "iteration %d: the deletion: %s", i, resps[0].Body)
		for n := 1; n < len(resps); n++ {
			if resps[n].Status != http.StatusOK {
				require.Equal(t, http.StatusNotFound, resps[n].Status, "iteration %d, turn %d: %s", i, n, resps[n].Body)
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
		resps := concurrently(e, org.Key,
			[3]any{"DELETE", "/api/datastores/" + stores[0], nil},
			[3]any{"PUT", "/api/agents/" + agents[0], map[string]any{"datastores": []string{stores[1], stores[0]}}},
			[3]any{"PUT", "/api/agents/" + agents[1], map[string]any{"datastores": stores}},
		)
		require.Equal(t, http.StatusOK, resps[0].Status, "iteration %d: the deletion: %s", i, resps[0].Body)
		for n := 1; n < len(resps); n++ {
			if resps[n].Status != http.StatusOK {
				require.Equal(t, http.StatusNotFound, resps[n].Status, "iteration %d, update %d: %s", i, n, resps[n].Body)
				require.Equal(t, fmt.Sprintf("datastore %q not found", stores[0]), resps[n].Err(t).Error.Message)
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

	done := make(chan testenv.Response)
	go func() {
		done <- e.Do("PUT", "/api/agents/"+agent, e.A.Key, map[string]any{"datastores": []string{kept, doomed}})
	}()
	dbtest.WaitForLockWait(t, e.App.Pool, "datastores")
	require.NoError(t, tx.Commit(ctx))
	r := <-done
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
	require.Equal(t, fmt.Sprintf("datastore %q not found", doomed), r.Err(t).Error.Message)

	r = e.Do("GET", "/api/agents/"+agent, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var got struct{ Datastores []string }
	r.JSON(t, &got)
	require.Equal(t, []string{kept}, got.Datastores)
}

// An update that keeps an endpoint's stored header value (sent empty)
// keeps the value stored when it writes, not one read before another
// update committed: a header rotated meanwhile (a leaked key replaced)
// was put back by an update that only meant to keep it.
func TestKeptHeaderIsTheOneStoredWhenWritten(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	c := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	settings := func(value, description string) *parleyv1.ToolSettings {
		return &parleyv1.ToolSettings{HttpRequest: &parleyv1.HttpRequestSettings{Endpoints: []*parleyv1.HttpEndpoint{{
			Name: "crm", Description: description, Url: "https://api.example.com/leads", Headers: map[string]string{"Authorization": value},
		}}}}
	}
	mask := &fieldmaskpb.FieldMask{Paths: []string{"tool_settings"}}
	a, err := c.CreateAgent(ctx, &parleyv1.CreateAgentRequest{Name: "n", Instructions: "i", Tools: []string{"http_request"}, ToolSettings: settings("Bearer old", "")})
	require.NoError(t, err)
	id := uuid.MustParse(a.GetAgent().GetId())
	stored := func() string {
		var s string
		require.NoError(t, e.App.Store.Tenant(ctx, e.A.ID, func(q *dbq.Queries) error {
			ag, err := q.GetAgent(ctx, dbq.GetAgentParams{OrgID: e.A.ID, ID: id})
			s = string(ag.ToolSettings)
			return err
		}))
		return s
	}
	old := stored()
	_, err = c.UpdateAgent(ctx, &parleyv1.UpdateAgentRequest{Id: id.String(), ToolSettings: settings("Bearer new", ""), UpdateMask: mask})
	require.NoError(t, err)
	rotated := stored()
	require.NotEqual(t, old, rotated)
	setSettings := func(tx pgx.Tx, s string) {
		_, err := tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "UPDATE agents SET tool_settings = $1::jsonb WHERE org_id = $2 AND id = $3", s, e.A.ID, id)
		require.NoError(t, err)
	}
	// Back to the old value; then the rotation again, held open.
	tx, err := e.App.Pool.Begin(ctx)
	require.NoError(t, err)
	setSettings(tx, old)
	require.NoError(t, tx.Commit(ctx))
	rotation, err := e.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer rotation.Rollback(ctx) //nolint:errcheck
	setSettings(rotation, rotated)

	done := make(chan error, 1)
	go func() {
		// Keeps the header (empty value), changes the description.
		_, err := c.UpdateAgent(ctx, &parleyv1.UpdateAgentRequest{Id: id.String(), ToolSettings: settings("", "Leads"), UpdateMask: mask})
		done <- err
	}()
	time.Sleep(500 * time.Millisecond) // the update is under way, waiting on the rotation's row
	require.NoError(t, rotation.Commit(ctx))
	require.NoError(t, <-done)

	header := func(s string) []byte {
		eps := tool.ParseSettings([]byte(s)).HTTPRequest.Endpoints
		require.Len(t, eps, 1)
		return eps[0].Sealed["Authorization"]
	}
	got := stored()
	require.Equal(t, "Leads", tool.ParseSettings([]byte(got)).HTTPRequest.Endpoints[0].Description)
	require.Equal(t, header(rotated), header(got), "the rotated header value was put back to the old one")
}
