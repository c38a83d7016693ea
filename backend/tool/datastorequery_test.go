package tool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

func TestOffered(t *testing.T) {
	t.Parallel()
	require.True(t, Offered(nil, DatastoreQuery), "no list: every tool")
	require.True(t, Offered([]string{"web_search", DatastoreQuery}, DatastoreQuery))
	require.False(t, Offered([]string{"web_search"}, DatastoreQuery), "a list is an allow-list")
}

// Calls the model got wrong are answered with an error it can read, before
// any search (Search has no store here: a search would panic).
func TestSearchRefusesBadCalls(t *testing.T) {
	t.Parallel()
	s := &Search{}
	for _, c := range []struct {
		call llm.ToolCall
		want string
	}{
		{llm.ToolCall{ID: "1", Name: "web_search", Arguments: `{"query":"x"}`}, `unknown tool "web_search"`},
		{llm.ToolCall{ID: "2", Name: DatastoreQuery, Arguments: `{"q":"x"}`}, `non-empty "query"`},
		{llm.ToolCall{ID: "3", Name: DatastoreQuery, Arguments: `{"query":"   "}`}, `non-empty "query"`},
		{llm.ToolCall{ID: "4", Name: DatastoreQuery, Arguments: `not json`}, `non-empty "query"`},
		{llm.ToolCall{ID: "5", Name: DatastoreQuery, Arguments: `{"query":7}`}, `non-empty "query"`},
	} {
		res, found, err := s.Run(context.Background(), c.call, 0)
		require.NoError(t, err)
		require.Nil(t, found)
		require.True(t, res.IsError, c.call.Arguments)
		require.Equal(t, c.call.ID, res.CallID)
		require.Contains(t, res.Content, c.want)
	}
	def := s.Definition()
	require.Equal(t, DatastoreQuery, def.Name)
	require.Equal(t, []string{"query"}, def.Parameters["required"])
}
