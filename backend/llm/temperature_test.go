package llm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

// OpenAI's reasoning models (o3, gpt-5) refuse any temperature but their
// own (400 "Unsupported value: 'temperature'"): a models-file route to one
// says "temperature": false, and its requests carry none. The others carry
// the agent's.
func TestRouteWithTheModelsTemperatureSendsNone(t *testing.T) {
	t.Parallel()
	srv, bodies := recordingServer(t)
	c, err := llm.LoadCatalog(llm.CatalogConfig{Env: func(string) string { return "" }, File: modelsFile(t, `{
		"providers": {"up": {"type": "openai", "baseURL": "`+srv.URL+`/v1"}},
		"models": {"gpt-4o": {"provider": "up", "model": "o3", "temperature": false}, "gpt-4o-mini": {"provider": "up", "model": "small"}}}`)})
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		fixed bool
	}{{"gpt-4o", true}, {"gpt-4o-mini", false}} {
		r := c.Resolve(tc.name)
		require.Equal(t, tc.fixed, r.FixedTemperature, tc.name)
		req := llm.Request{Model: r.Upstream, Temperature: 0.7, ModelTemperature: r.FixedTemperature, Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}
		_, _, _, err := collect(t, r.Model, req)
		require.NoError(t, err, tc.name)
		body := <-bodies
		if tc.fixed {
			require.NotContains(t, body, "temperature", "%s: the model's own", tc.name)
		} else {
			require.EqualValues(t, 0.7, body["temperature"], "%s: the agent's", tc.name)
		}
	}
}
