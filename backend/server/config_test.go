package server

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/require"
)

// The web search backends are read from their variables, and a flag wins
// over its variable.
func TestWebSearchConfig(t *testing.T) {
	t.Setenv("PARLEY_SEARXNG_URL", "http://searx.internal:8080")
	t.Setenv("PARLEY_BRAVE_API_KEY", "brave-key")
	t.Setenv("PARLEY_TAVILY_BASE_URL", "http://tavily.test")
	var c Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c.Flags(fs)
	require.NoError(t, fs.Parse([]string{"--tavily-api-key", "tvly-key"}))
	require.NoError(t, c.Err())
	require.Equal(t, "http://searx.internal:8080", c.WebSearch.SearxngURL)
	require.Equal(t, "brave-key", c.WebSearch.BraveAPIKey)
	require.Empty(t, c.WebSearch.BraveBaseURL)
	require.Equal(t, "tvly-key", c.WebSearch.TavilyAPIKey)
	require.Equal(t, "http://tavily.test", c.WebSearch.TavilyBaseURL)

	fs = flag.NewFlagSet("serve", flag.ContinueOnError)
	c = Config{}
	c.Flags(fs)
	require.NoError(t, fs.Parse([]string{"--searxng-url", "http://other:8888"}))
	require.Equal(t, "http://other:8888", c.WebSearch.SearxngURL)
}
