package chat_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
)

// An answer cites the passages it used, with their text, and the
// conversation's history returns them. Deleting the datasource takes its
// text out of those answers too, shortly after (a job): the citation
// stays, what the document said goes (it stayed readable there after its
// chunks were gone). Deleting the datastore does the same for the
// datasources it takes with it.
func TestDeletedDatasourceTextLeavesCitingAnswers(t *testing.T) {
	t.Parallel()
	f := &fixture{Env: testenv.New(t, testenv.WithWorkers)}
	r := f.Do("POST", "/api/datastores", f.A.Key, map[string]any{"name": "docs"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var store struct{ ID string }
	r.JSON(t, &store)
	const secret = "The vault combination is seven seven four nine."
	add := func(name, text string) string { return f.source(t, store.ID, name, text) }
	gone := add("vault", secret)
	const kept = "The vault is opened by the manager on duty."
	other := add("manager", kept)
	agent := f.agent(t, `{"name":"K","instructions":"i","datastores":["`+store.ID+`"]}`)
	status, _, resp := f.chat(t, agent, f.A.Key, `{"query":"What is the vault combination?","conversationId":"vault-1"}`)
	require.Equal(t, http.StatusOK, status, "%s", resp.Body)

	type history struct {
		Messages []struct {
			Sources []map[string]any `json:"sources"`
		} `json:"messages"`
	}
	read := func() (history, string) {
		r := f.Do("GET", "/api/v2/conversations/vault-1", f.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var h history
		r.JSON(t, &h)
		return h, string(r.Body)
	}
	// cited counts the sources of datasource ds in the history, and how
	// many of them still hold text.
	cited := func(h history, ds string) (citations, withText int) {
		for _, m := range h.Messages {
			for _, s := range m.Sources {
				if s["datasourceId"] != ds {
					continue
				}
				citations++
				for _, k := range []string{"chunk", "excerpt", "heading"} {
					if v, _ := s[k].(string); v != "" {
						withText++
						break
					}
				}
			}
		}
		return citations, withText
	}
	// forgotten waits, within a bound, until ds's cited text is gone
	// from the history; the citations stay. (Every 250 ms: the key's rate
	// limit allows 300 requests a minute.)
	forgotten := func(ds string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			h, body := read()
			citations, withText := cited(h, ds)
			require.Positive(t, citations, "the citation stays: %s", body)
			if withText == 0 {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("the deleted datasource's text is still in the history after 20 s: %s", body)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}

	h, before := read()
	require.Contains(t, before, `"datasourceId":"`+gone+`"`, "the answer cites the vault: %s", before)
	require.Contains(t, before, "seven seven four nine", "the cited passage's text")
	_, keptText := cited(h, other)

	r = f.Do("DELETE", "/api/datasources/"+gone, f.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	after := forgotten(gone)
	// The answer itself is what was said; only the cited passages are the
	// document's, and only the deleted one's.
	h, _ = read()
	if _, n := cited(h, other); n != keptText {
		t.Fatalf("another datasource's passages holding text: %d, were %d: %s", n, keptText, after)
	}
	if keptText == 0 {
		return // the answer cited only the vault
	}

	// The datastore's deletion takes the datasources it cascades to, and
	// their cited text.
	r = f.Do("DELETE", "/api/datastores/"+store.ID, f.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	forgotten(other)
}
