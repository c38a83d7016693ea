package llm

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
)

// The model names of the interface specification (SPEC §2.1, §4.1).
var SpecModels = []string{"gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet", "gemini-1-5-pro"}

// Route is how one model name is served.
type Route struct {
	// Name is the spec's model name.
	Name string
	// Upstream is the provider's model id.
	Upstream string
	Model    Model
	// Prices in US dollars per million tokens, for usage.cost.
	InputPerMTok, OutputPerMTok float64
	// ContextTokens is the model's context window; 0: DefaultContextTokens.
	ContextTokens int
	// NoTools: the upstream model cannot call tools (some models behind
	// OpenAI-compatible servers refuse a request that offers any), so none
	// are offered.
	NoTools bool
	// FixedTemperature: the upstream model accepts no temperature but its
	// own (OpenAI's reasoning models refuse any other, 400), so none is
	// sent and the agent's is not used.
	FixedTemperature bool
	// NoImages: the upstream model reads no images (a text-only model
	// behind an OpenAI-compatible server refuses a request carrying one),
	// so a message with an image is refused before the model is called.
	NoImages bool
}

// ReadsImages reports whether the route's model is given a message's
// images: not the offline engine's, which reads text alone, nor one the
// models file says reads none.
func (r Route) ReadsImages() bool {
	_, local := r.Model.(Local)
	return !local && !r.NoImages
}

// DefaultContextTokens is the context window assumed for a model the
// catalog does not know (and the offline engine's).
const DefaultContextTokens = 16000

// HistoryBudget is how many tokens of conversation history a prompt may
// hold: the context window less the prompt without its history (the
// system prompt with the retrieved passages, as sent, and the question:
// PromptTokens of it) and room for the answer (MaxOutputTokens, which
// every provider is asked for: OpenAI and vLLM refuse a prompt that leaves
// it less), and never more than 32,000 (long histories cost more than
// they help).
func (r Route) HistoryBudget(promptTokens int) int {
	return max(0, min(r.window()-MaxOutputTokens-promptTokens, maxHistoryTokens))
}

// maxHistoryTokens bounds HistoryBudget.
const maxHistoryTokens = 32000

// WindowTokens is what req adds to a prompt of held tokens, for this
// route's window arithmetic (HistoryBudget, AnswerRoom): PromptTokens(req),
// or req's bytes when even they leave the whole history budget, since then
// the exact count changes neither the budget nor the answer's room.
// Tokenizing costs about a millisecond per 4 KB (a turn's passages, a tool
// round's results), on every turn of a large window for nothing.
func (r Route) WindowTokens(held int, req Request) int {
	if n := promptBytes(req); r.HistoryBudget(held+n) == maxHistoryTokens {
		return n
	}
	return PromptTokens(req)
}

func (r Route) window() int {
	if r.ContextTokens == 0 {
		return DefaultContextTokens
	}
	return r.ContextTokens
}

// minAnswerTokens is the least AnswerRoom asks for: a prompt that leaves
// less is too large for the window, and the provider says so.
const minAnswerTokens = 256

// AnswerRoom is the bound on the reply to a prompt of promptTokens: what
// the window leaves after it, at most MaxOutputTokens and at least
// minAnswerTokens. A turn's first call gets MaxOutputTokens unless its
// prompt without history (the passages, the question) already leaves less
// (HistoryBudget is then 0); a call after tool rounds, whose calls and
// results grow the prompt, may get less, where OpenAI and vLLM would
// refuse the prompt and MaxOutputTokens past the window.
func (r Route) AnswerRoom(promptTokens int) int {
	return max(minAnswerTokens, min(MaxOutputTokens, r.window()-promptTokens))
}

// ResultRoom is how many tokens a tool round's results may add to a
// prompt of promptTokens (the round's calls included) and leave the next
// reply at least minResultAnswer of the window: 0 when the prompt leaves
// less already. Results past it passed the window: the provider refused
// the prompt, after the round's tools had run.
func (r Route) ResultRoom(promptTokens int) int {
	return max(0, r.window()-promptTokens-minResultAnswer)
}

// minResultAnswer is the least room ResultRoom leaves the reply that reads
// a round's results.
const minResultAnswer = 1024

// Cost of a call's usage.
func (r Route) Cost(u Usage) float64 {
	return (float64(u.PromptTokens)*r.InputPerMTok + float64(u.CompletionTokens)*r.OutputPerMTok) / 1e6
}

// Catalog maps model names to routes. A name with no configured provider is
// served by the local engine.
type Catalog struct {
	routes map[string]Route
}

// Resolve returns the route of a model name.
func (c *Catalog) Resolve(name string) Route {
	if r, ok := c.routes[name]; ok {
		return r
	}
	return Route{Name: name, Upstream: "local", Model: Local{}}
}

// Describe lists "name -> provider/upstream" for every spec model, for the
// start-up log.
func (c *Catalog) Describe() map[string]string {
	out := map[string]string{}
	names := append([]string{}, SpecModels...)
	for n := range c.routes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := c.Resolve(n)
		out[n] = r.Model.Provider() + "/" + r.Upstream
	}
	return out
}

// CatalogConfig says which providers exist and how model names map to them.
type CatalogConfig struct {
	// Env reads a variable (os.Getenv by default).
	Env func(string) string
	// File is a JSON models file (PARLEY_MODELS_FILE), optional.
	File string
	// Retry policy of every provider.
	Attempts         int
	Backoff, MaxWait time.Duration
}

// modelsFile is the format of PARLEY_MODELS_FILE; see docs/models.md.
type modelsFile struct {
	Providers map[string]struct {
		Type      string `json:"type"` // openai (any OpenAI-compatible server)
		BaseURL   string `json:"baseURL"`
		APIKeyEnv string `json:"apiKeyEnv"`
		// MaxTokens sends the reply's bound in max_tokens as well: for a
		// server that reads only it (Ollama). Not by default: a server in
		// front of OpenAI's reasoning models (Azure, a proxy) refuses it.
		MaxTokens bool `json:"maxTokens"`
	} `json:"providers"`
	Models map[string]struct {
		Provider      string   `json:"provider"`
		Model         string   `json:"model"`
		InputPerMTok  *float64 `json:"inputPerMTok"`
		OutputPerMTok *float64 `json:"outputPerMTok"`
		ContextTokens int      `json:"contextTokens"`
		Tools         *bool    `json:"tools"`
		Temperature   *bool    `json:"temperature"`
		Images        *bool    `json:"images"`
	} `json:"models"`
}

// Default upstream ids and list prices (USD per million tokens, input and
// output) of the spec's model names. The spec's Claude and Gemini names are
// of models their providers have retired (claude-3-5-sonnet-latest on
// 2025-10-22, gemini-1.5-pro on 2025-09-24: a call to them is a 404), so
// they are served by the current models of the same tier: Claude Sonnet
// 4.5, at the same price, and Gemini's alias of its newest Pro model, at
// Gemini 3 Pro's price (an alias moves: a models file pins a version).
var defaults = map[string]struct {
	provider, upstream string
	in, out            float64
	context            int
}{
	"gpt-4o":            {"openai", "gpt-4o", 2.5, 10, 128000},
	"gpt-4o-mini":       {"openai", "gpt-4o-mini", 0.15, 0.6, 128000},
	"claude-3-5-sonnet": {"anthropic", "claude-sonnet-4-5", 3, 15, 200000},
	"gemini-1-5-pro":    {"gemini", "gemini-pro-latest", 2, 12, 1048576},
}

// httpURL reports whether s is an http(s) URL with a host.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// LoadCatalog builds the catalog: providers from PARLEY_OPENAI_API_KEY (and
// PARLEY_OPENAI_BASE_URL), PARLEY_ANTHROPIC_API_KEY, PARLEY_GEMINI_API_KEY,
// and the models file, which may add OpenAI-compatible providers and remap
// any name.
func LoadCatalog(cfg CatalogConfig) (*Catalog, error) {
	env := cfg.Env
	if env == nil {
		env = os.Getenv
	}
	if cfg.Attempts == 0 {
		cfg.Attempts, cfg.Backoff, cfg.MaxWait = 3, 500*time.Millisecond, 10*time.Second
	}
	wrap := func(m Model) Model { return Retry(m, cfg.Attempts, cfg.Backoff, cfg.MaxWait) }
	// A base URL that is no URL (a host without its scheme) was taken, and
	// every call to the provider failed, the server started: it is refused
	// at start, as a models file's baseURL is.
	for _, v := range []string{"PARLEY_OPENAI_BASE_URL", "PARLEY_ANTHROPIC_BASE_URL", "PARLEY_GEMINI_BASE_URL"} {
		if s := env(v); s != "" && !httpURL(s) {
			return nil, fmt.Errorf("%s: give the provider's http(s) base URL, e.g. https://gateway.example.com/v1", v)
		}
	}
	providers := map[string]Model{}
	if k := env("PARLEY_OPENAI_API_KEY"); k != "" {
		providers["openai"] = wrap(NewOpenAI(OpenAIConfig{Name: "openai", APIKey: k, BaseURL: env("PARLEY_OPENAI_BASE_URL")}))
	}
	if k := env("PARLEY_ANTHROPIC_API_KEY"); k != "" {
		providers["anthropic"] = wrap(NewAnthropic(AnthropicConfig{APIKey: k, BaseURL: env("PARLEY_ANTHROPIC_BASE_URL")}))
	}
	if k := env("PARLEY_GEMINI_API_KEY"); k != "" {
		g, err := NewGemini(GeminiConfig{APIKey: k, BaseURL: env("PARLEY_GEMINI_BASE_URL")})
		if err != nil {
			return nil, err
		}
		providers["gemini"] = wrap(g)
	}
	c := &Catalog{routes: map[string]Route{}}
	for name, d := range defaults {
		if m, ok := providers[d.provider]; ok {
			c.routes[name] = Route{Name: name, Upstream: d.upstream, Model: m, InputPerMTok: d.in, OutputPerMTok: d.out, ContextTokens: d.context}
		}
	}
	if cfg.File == "" {
		return c, nil
	}
	raw, err := os.ReadFile(cfg.File)
	if err != nil {
		return nil, fmt.Errorf("models file: %w", err)
	}
	var f modelsFile
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("models file %s: %w", cfg.File, err)
	}
	for name, p := range f.Providers {
		if p.Type != "openai" {
			return nil, fmt.Errorf("models file: provider %q: type %q is not supported (openai)", name, p.Type)
		}
		// Without a server's URL the client calls api.openai.com, with
		// this provider's key: a key of another server sent to OpenAI.
		if !httpURL(p.BaseURL) {
			return nil, fmt.Errorf("models file: provider %q: baseURL must be the server's http(s) URL, e.g. http://127.0.0.1:11434/v1", name)
		}
		key := ""
		if p.APIKeyEnv != "" {
			// A key named and not set is a mistake, not a server without
			// keys (that one names no apiKeyEnv): every call would be a 401.
			if key = env(p.APIKeyEnv); key == "" {
				return nil, fmt.Errorf("models file: provider %q: its apiKeyEnv %s is not set", name, p.APIKeyEnv)
			}
		}
		providers[name] = wrap(NewOpenAI(OpenAIConfig{Name: name, APIKey: key, BaseURL: p.BaseURL, MaxTokens: p.MaxTokens}))
	}
	for name, m := range f.Models {
		if name == "" || m.Model == "" {
			return nil, fmt.Errorf("models file: model %q needs a name and an upstream model", name)
		}
		r := Route{Name: name, Upstream: m.Model}
		if m.Provider == "local" {
			r.Model = Local{}
		} else if r.Model = providers[m.Provider]; r.Model == nil {
			return nil, fmt.Errorf("models file: model %q: provider %q is not configured", name, m.Provider)
		}
		if d, ok := defaults[name]; ok && d.upstream == m.Model {
			r.InputPerMTok, r.OutputPerMTok, r.ContextTokens = d.in, d.out, d.context
		}
		// A negative price made every turn's cost negative, which the cost
		// counter (backend/metrics) refuses with a panic: the turn failed
		// after the model was paid, its answer lost.
		if m.ContextTokens < 0 || (m.InputPerMTok != nil && *m.InputPerMTok < 0) || (m.OutputPerMTok != nil && *m.OutputPerMTok < 0) {
			return nil, fmt.Errorf("models file: model %q: contextTokens, inputPerMTok and outputPerMTok are 0 or more", name)
		}
		if m.ContextTokens > 0 {
			r.ContextTokens = m.ContextTokens
		}
		r.NoTools = m.Tools != nil && !*m.Tools
		r.FixedTemperature = m.Temperature != nil && !*m.Temperature
		r.NoImages = m.Images != nil && !*m.Images
		if m.InputPerMTok != nil {
			r.InputPerMTok = *m.InputPerMTok
		}
		if m.OutputPerMTok != nil {
			r.OutputPerMTok = *m.OutputPerMTok
		}
		c.routes[name] = r
	}
	return c, nil
}

// NewCatalog is a catalog of the given routes (tests, embedding).
func NewCatalog(routes ...Route) *Catalog {
	c := &Catalog{routes: map[string]Route{}}
	for _, r := range routes {
		c.routes[r.Name] = r
	}
	return c
}
