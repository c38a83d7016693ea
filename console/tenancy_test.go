package console_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/member"
)

// Another organization's ids are shown as ids that do not exist (404),
// where the API answers 403 (SPEC §5.6): the console confirms nothing.
func testOtherOrganizationsIDs(t *testing.T, e *env) {
	org := e.Bootstrap("Secretive", "pro")
	agent := e.api(t, "POST", "/api/agents", org.Key, map[string]any{"name": "Hidden agent", "instructions": "x"})
	require.Equal(t, http.StatusCreated, agent.Status, "%s", agent.Body)
	store := e.api(t, "POST", "/api/datastores", org.Key, map[string]any{"name": "Hidden store"})
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	idOf := func(b []byte) string { return strings.SplitN(strings.SplitN(string(b), `"id":"`, 2)[1], `"`, 2)[0] }
	agentID, storeID := idOf(agent.Body), idOf(store.Body)
	require.Equal(t, http.StatusForbidden, e.api(t, "GET", "/api/agents/"+agentID, e.B.Key, nil).Status, "the API's answer changed")

	c := e.as(t, e.B.ID, member.Admin)
	for _, p := range []page{
		c.get("/console/agents/" + agentID),
		c.get("/console/datastores/" + storeID),
		c.post("/console/agents/"+agentID+"/delete", nil),
		c.post("/console/agents/"+agentID, url.Values{"name": {"Taken over"}, "instructions": {"x"}, "temperature": {"0.5"}, "model": {"gpt-4o-mini"}}),
		// A form naming the other's datastore.
		c.post("/console/agents", url.Values{"name": {"Spy"}, "instructions": {"x"}, "temperature": {"0.5"}, "model": {"gpt-4o-mini"}, "datastores": {storeID}}),
	} {
		require.Equal(t, http.StatusNotFound, p.Status, p.Body)
		require.NotContains(t, p.Body, "Hidden")
		require.NotContains(t, p.Body, "another organization")
	}
	// The playground's stream of the other's agent.
	resp := agStream(c, "/console/agents/"+agentID+"/chat", url.Values{"query": {"hi"}})
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", b)
	require.NotContains(t, string(b), "another organization")
	r := e.api(t, "GET", "/api/agents/"+agentID, org.Key, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), "Hidden agent", "another organization changed the agent")
}
