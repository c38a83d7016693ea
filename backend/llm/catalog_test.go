package llm_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

func modelsFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "models.json")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestModelsFile(t *testing.T) {
	t.Parallel()
	env := func(k string) string {
		return map[string]string{"PARLEY_OPENAI_API_KEY": "sk-test", "VLLM_KEY": "v"}[k]
	}
	c, err := llm.LoadCatalog(llm.CatalogConfig{Env: env, File: modelsFile(t, `{
		"providers": {"vllm": {"type": "openai", "baseURL": "http://127.0.0.1:1/v1", "apiKeyEnv": "VLLM_KEY"}},
		"models": {
			"gpt-4o": {"provider": "vllm", "model": "qwen", "contextTokens": 32000, "tools": false, "images": false},
			"gpt-4o-mini": {"provider": "openai", "model": "gpt-4o-mini"},
			"claude-3-5-sonnet": {"provider": "local", "model": "local"}
		}}`)})
	require.NoError(t, err)
	big := c.Resolve("gpt-4o")
	require.Equal(t, "vllm", big.Model.Provider())
	require.Equal(t, "qwen", big.Upstream)
	require.Equal(t, 32000, big.ContextTokens)
	require.True(t, big.NoTools, `"tools": false`)
	require.False(t, big.ReadsImages(), `"images": false`)
	require.Zero(t, big.InputPerMTok, "another upstream model: no built-in price")
	mini := c.Resolve("gpt-4o-mini")
	require.False(t, mini.NoTools, "tools by default")
	require.True(t, mini.ReadsImages(), "images by default")
	require.Equal(t, 0.15, mini.InputPerMTok, "the built-in price of the built-in upstream")
	require.Equal(t, "local", c.Resolve("claude-3-5-sonnet").Model.Provider())
	require.False(t, c.Resolve("claude-3-5-sonnet").ReadsImages(), "the offline engine reads text alone")
	require.False(t, c.Resolve("gemini-1-5-pro").ReadsImages(), "nor when it serves a name nothing routes")

	for name, body := range map[string]string{
		"unknown field":          `{"models": {"gpt-4o": {"provider": "openai", "model": "x", "tool": false}}}`,
		"unknown provider type":  `{"providers": {"p": {"type": "grpc"}}}`,
		"unconfigured provider":  `{"models": {"gpt-4o": {"provider": "anthropic", "model": "x"}}}`,
		"route without upstream": `{"models": {"gpt-4o": {"provider": "openai"}}}`,
		// The key of a server without its URL went to api.openai.com.
		"provider without baseURL":     `{"providers": {"vllm": {"type": "openai", "apiKeyEnv": "VLLM_KEY"}}}`,
		"provider with a bare baseURL": `{"providers": {"vllm": {"type": "openai", "baseURL": "127.0.0.1:8000/v1"}}}`,
		"apiKeyEnv not set":            `{"providers": {"vllm": {"type": "openai", "baseURL": "http://127.0.0.1:1/v1", "apiKeyEnv": "VLLM_KEYS"}}}`,
		"negative price":               `{"models": {"gpt-4o": {"provider": "openai", "model": "x", "inputPerMTok": -1}}}`,
		"negative context":             `{"models": {"gpt-4o": {"provider": "openai", "model": "x", "contextTokens": -5}}}`,
		"negative output price":        `{"models": {"gpt-4o": {"provider": "openai", "model": "x", "outputPerMTok": -0.5}}}`,
	} {
		_, err := llm.LoadCatalog(llm.CatalogConfig{Env: env, File: modelsFile(t, body)})
		require.Error(t, err, name)
	}
}

// A provider's base URL from the environment is refused at start, naming
// its variable, when it is no http(s) URL: every call to the provider
// failed instead, the server started.
func TestProviderBaseURLFromTheEnvironment(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"OPENAI", "ANTHROPIC", "GEMINI"} {
		for _, bad := range []string{"gateway.example.com/v1", "ftp://gateway.example.com", "https://", "http://[::1"} {
			vars := map[string]string{"PARLEY_" + p + "_API_KEY": "k", "PARLEY_" + p + "_BASE_URL": bad}
			_, err := llm.LoadCatalog(llm.CatalogConfig{Env: func(k string) string { return vars[k] }})
			require.ErrorContains(t, err, "PARLEY_"+p+"_BASE_URL", bad)
		}
		vars := map[string]string{"PARLEY_" + p + "_API_KEY": "k", "PARLEY_" + p + "_BASE_URL": "https://gateway.example.com/v1"}
		_, err := llm.LoadCatalog(llm.CatalogConfig{Env: func(k string) string { return vars[k] }})
		require.NoError(t, err, p)
	}
}
