package knowledge_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
)

// pages reads a cursor listing page after page (limit 2) and returns the
// names it gave, in order.
func pages(t *testing.T, f kfix, key, path, items string) []string {
	t.Helper()
	var names []string
	cursor := ""
	for range 20 {
		r := f.Do("GET", path+"?limit=2&cursor="+cursor, key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var page map[string]any
		r.JSON(t, &page)
		list := page[items].([]any)
		require.LessOrEqual(t, len(list), 2)
		for _, x := range list {
			names = append(names, x.(map[string]any)["name"].(string))
		}
		next, _ := page["nextCursor"].(string)
		if next == "" {
			require.Contains(t, string(r.Body), `"nextCursor":null`, "null on the last page")
			return names
		}
		cursor = next
	}
	t.Fatalf("%s: no last page after 20", path)
	return nil
}

func TestDatastoresAndDatasourcesPageByCursor(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t)}
	var stores []string
	for i := range 5 {
		stores = append(stores, f.datastore(t, f.A.Key, fmt.Sprintf("store %d", i)))
	}
	f.datastore(t, f.B.Key, "B's store")
	require.Equal(t, []string{"store 4", "store 3", "store 2", "store 1", "store 0"},
		pages(t, f, f.A.Key, "/api/datastores", "datastores"), "newest first, each once, none of B's")

	for i := range 3 {
		f.source(t, f.A.Key, stores[0], map[string]any{"type": "text", "name": fmt.Sprintf("text %d", i), "text": "x"})
	}
	f.source(t, f.A.Key, stores[1], map[string]any{"type": "text", "name": "elsewhere", "text": "x"})
	require.Equal(t, []string{"text 2", "text 1", "text 0"},
		pages(t, f, f.A.Key, "/api/datastores/"+stores[0]+"/datasources", "datasources"))

	// Without a limit, a page holds 100.
	r := f.Do("GET", "/api/datastores", f.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), `"nextCursor":null`)

	for _, path := range []string{"/api/datastores", "/api/datastores/" + stores[0] + "/datasources"} {
		for q, field := range map[string]string{"limit=abc": "limit", "limit=101": "limit", "limit=-1": "limit", "cursor=nope": "cursor"} {
			r := f.Do("GET", path+"?"+q, f.A.Key, nil)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s?%s: %s", path, q, r.Body)
			require.Equal(t, field, r.Err(t).Error.Field, "%s?%s", path, q)
		}
	}
	// Another organization's datastore is forbidden, whatever the page.
	r = f.Do("GET", "/api/datastores/"+stores[0]+"/datasources?limit=1", f.B.Key, nil)
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
}
