package knowledge_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
)

// A document and a question that write the same accented letter in two
// ways (precomposed, or a letter and a combining accent, as some PDFs and
// macOS files do) still meet: in the full-text half, which ranks the chunk
// first in both lists, and in the offline engine's answer.
func TestSearchMatchesAcrossUnicodeForms(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t, testenv.WithWorkers)}
	store := f.datastore(t, f.A.Key, "Laden")
	f.texts(t, f.A.Key, store, map[string]string{
		"hours":   "Unsere O\u0308ffnungszeiten sind 9 bis 17 Uhr.",       // decomposed
		"cafe":    "Das Caf\u00e9 serviert Fr\u00fchst\u00fcck ab 8 Uhr.", // precomposed
		"parking": "Parkpl\u00e4tze gibt es hinter dem Haus.",
	})
	for q, want := range map[string]string{
		"\u00d6ffnungszeiten": "hours", // precomposed question, decomposed document
		"Cafe\u0301":          "cafe",  // and the other way round
	} {
		status, rs := f.query(t, f.A.Key, store, map[string]any{"query": q, "topK": 3})
		require.Equal(t, 200, status)
		require.NotEmpty(t, rs, q)
		require.Equal(t, want, rs[0].DatasourceName, "%q found %+v", q, rs)
		require.InDelta(t, 1, rs[0].Score, 1e-9, "%q: first in both halves, %+v", q, rs)
	}

	agent := f.agent(t, f.A.Key, store)
	r := f.Do("POST", "/api/v2/agent/"+agent+"/chat", f.A.Key, map[string]any{"query": "Wann sind die \u00d6ffnungszeiten?", "conversationId": "nfc-1"})
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var rep struct{ Answer string }
	r.JSON(t, &rep)
	require.Contains(t, rep.Answer, "9 bis 17 Uhr", "the offline engine answers from the hours entry")
}
