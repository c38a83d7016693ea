package chat_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
)

// A datasource holding a text twice (a footer on every page) has two
// chunks of it, which a search finds together. The model is given the
// passage once, numbered as the reply's sources, which hold it once: given
// [1] and [2] of one text, its [3] was the reply's second source.
func TestPassageHeldTwiceIsGivenOnce(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	f := &fixture{Env: testenv.New(t, testenv.WithWorkers, testenv.WithFakeModels(fake)), fake: fake}
	// One sentence longer than half a chunk (300 tokens), so that each copy
	// is a chunk of its own, with no overlap before it.
	var words []string
	for i := range 90 {
		words = append(words, fmt.Sprintf("footer%d", i))
	}
	footer := "Contact the warehouse team " + strings.Join(words, " ") + "."
	store, _ := f.datastore(t, footer+"\n\n"+footer)
	agent := f.agent(t, fmt.Sprintf(`{"name":"K","instructions":"i","datastores":[%q]}`, store))
	status, rep, resp := f.chat(t, agent, f.A.Key, `{"query":"How do I contact the warehouse team?","conversationId":"twice"}`)
	require.Equal(t, http.StatusOK, status, "%s", resp.Body)
	require.Len(t, rep.Sources, 1, "%s", resp.Body)

	reqs := fake.Requests()
	require.Len(t, reqs, 1)
	system := reqs[0]["messages"].([]any)[0].(map[string]any)
	require.Equal(t, "system", system["role"])
	prompt := system["content"].(string)
	require.Equal(t, 1, strings.Count(prompt, footer), "the passage once: %s", prompt)
	require.Contains(t, prompt, "[1] ")
	require.NotContains(t, prompt, "[2] ")
}
