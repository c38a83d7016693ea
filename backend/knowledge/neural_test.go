package knowledge_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// With the neural embedder (the default of parley serve), a question that
// shares no word with the right entry finds it: through the query API and
// as the first source of a chat answer.
func TestNeuralEmbedderEndToEnd(t *testing.T) {
	t.Parallel()
	f := kfix{testenv.New(t, testenv.WithWorkers, func(c *server.Config) { c.Embeddings.Default = "use-lite" })}
	store := f.datastore(t, f.A.Key, "Shop")
	r := f.Do("GET", "/api/datastores/"+store, f.A.Key, nil)
	var d struct{ EmbeddingModel string }
	r.JSON(t, &d)
	require.Equal(t, "universal-sentence-encoder-lite", d.EmbeddingModel)

	docs := map[string]string{
		"pets":     "Animals are welcome in the shop as long as they are kept on a leash.",
		"warranty": "Every appliance comes with a two year warranty covering parts and labour.",
		"hours":    "The shop opens at nine in the morning and closes at six in the evening.",
		"payment":  "We accept payment by credit card, debit card and bank transfer.",
		"shipping": "Parcels leave our warehouse every weekday and arrive within three working days.",
	}
	f.texts(t, f.A.Key, store, docs)
	// "dog" is not in any entry, nor is "guarantee" or "machines".
	for q, want := range map[string]string{"Can I bring my dog?": "pets", "Is there a guarantee on the machines?": "warranty"} {
		status, rs := f.query(t, f.A.Key, store, map[string]any{"query": q, "topK": 3})
		require.Equal(t, 200, status)
		require.NotEmpty(t, rs)
		require.Equal(t, want, rs[0].DatasourceName, "%q found %+v", q, rs)
	}

	agent := f.agent(t, f.A.Key, store)
	r = f.Do("POST", "/api/v2/agent/"+agent+"/chat", f.A.Key, `{"query":"Can I bring my dog?","conversationId":"dog-1"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var rep struct {
		Answer  string
		Sources []struct{ DatasourceName string }
	}
	r.JSON(t, &rep)
	require.NotEmpty(t, rep.Sources)
	require.Equal(t, "pets", rep.Sources[0].DatasourceName)
	require.Contains(t, rep.Answer, "leash", "the offline engine answers from the pets entry")

	// Something none of the entries is about: sources are still the nearest
	// chunks, but the offline engine does not pass them off as an answer.
	r = f.Do("POST", "/api/v2/agent/"+agent+"/chat", f.A.Key, `{"query":"Who won the football match yesterday?","conversationId":"dog-2"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &rep)
	require.Equal(t, llm.NoKnowledgeAnswer, rep.Answer)
}
