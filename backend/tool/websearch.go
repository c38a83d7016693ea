package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// WebSearch is the name of the tool that searches the web.
const WebSearch = "web_search"

var webSearch = Registration{
	Name: WebSearch,
	Missing: func(d *Deps, _ *Profile) string {
		if d.Search == nil {
			return "this deployment has no web search backend (its operator sets PARLEY_SEARXNG_URL, PARLEY_BRAVE_API_KEY or PARLEY_TAVILY_API_KEY)"
		}
		return ""
	},
	New: func(d *Deps, _ *Turn) Tool { return &webSearchTool{search: d.Search} },
}

// webResults is how many results a call gives the model.
const webResults = 5

// Bounds of one result, in bytes: its snippet and title are cut, a longer
// URL is no result.
const (
	snippetMax = 600
	titleMax   = 200
	urlMax     = 2048
)

// WebResult is one page a search found.
type WebResult struct {
	Title, URL, Snippet string
}

// Searcher is a web search backend.
type Searcher interface {
	// Backend names it: searxng, brave or tavily.
	Backend() string
	// Search returns at most n results for a query.
	Search(ctx context.Context, query string, n int) ([]WebResult, error)
}

// SearchConfig is the deployment's choice of web search backend; the first
// configured, in this order, wins.
type SearchConfig struct {
	// SearxngURL is a SearXNG instance's base URL (its JSON API, /search
	// with format=json, must be enabled).
	SearxngURL string
	// BraveAPIKey is a Brave Search API subscription token; BraveBaseURL
	// replaces https://api.search.brave.com (tests, proxies).
	BraveAPIKey, BraveBaseURL string
	// TavilyAPIKey is a Tavily API key; TavilyBaseURL replaces
	// https://api.tavily.com.
	TavilyAPIKey, TavilyBaseURL string
	// Client sends the searches; default: a client with a 10 s timeout.
	// These URLs are the operator's, not users': they may be private (a
	// SearXNG beside Parley), so netguard does not apply.
	Client *http.Client
}

// NewSearcher returns the configured backend, nil when none is.
func NewSearcher(c SearchConfig) Searcher {
	hc := c.Client
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second, CheckRedirect: sameHostRedirects}
	}
	switch {
	case c.SearxngURL != "":
		return &searxng{base: strings.TrimRight(c.SearxngURL, "/"), hc: hc}
	case c.BraveAPIKey != "":
		return &brave{base: orDefault(c.BraveBaseURL, "https://api.search.brave.com"), key: c.BraveAPIKey, hc: hc}
	case c.TavilyAPIKey != "":
		return &tavily{base: orDefault(c.TavilyBaseURL, "https://api.tavily.com"), key: c.TavilyAPIKey, hc: hc}
	}
	return nil
}

// webSearchTool is web_search: the deployment's backend's top results, as
// numbered passages the reply cites by URL.
type webSearchTool struct {
	search Searcher
}

func (*webSearchTool) Name() string { return WebSearch }

func (*webSearchTool) Description() string {
	return "Search the web. Returns the top " + strconv.Itoa(webResults) + " pages (title, URL, snippet). " +
		"Use it for current or public information the conversation and knowledge base do not hold; cite the pages you use."
}

func (*webSearchTool) Parameters() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"query": map[string]any{"type": "string", "description": "What to search the web for."},
		},
		"required": []string{"query"},
	}
}

func (*webSearchTool) Traits() Traits { return Traits{Cites: true} }

func (w *webSearchTool) Run(ctx context.Context, call Call) (Result, error) {
	var args struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil || strings.TrimSpace(args.Query) == "" {
		return Errorf(`the arguments must be a JSON object with a non-empty "query" string`), nil
	}
	found, err := w.search.Search(ctx, args.Query, webResults)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		// The backend's failure is the model's to work around, not the turn's.
		// Its detail can name the backend's host (a SearXNG beside Parley):
		// it goes to the log; the model, the visitor's tool_call event and
		// the stored call read what kind of failure it was.
		slog.WarnContext(ctx, "web search failed", "backend", w.search.Backend(), "err", err)
		return Errorf("web search failed (%s)", searchFailure(err)), nil
	}
	var kept []WebResult
	for _, r := range found {
		// Only web pages: a javascript: or data: URL is no source to cite.
		// A result's text is the backend's (or the page's) to choose: each
		// part is bounded (a title of 3 MiB went into the prompt and the
		// stored answer whole).
		if u, err := url.Parse(r.URL); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && len(r.URL) <= urlMax {
			r.Title, r.Snippet = clip(strings.TrimSpace(r.Title), titleMax), clip(strings.TrimSpace(r.Snippet), snippetMax)
			kept = append(kept, r)
		}
		if len(kept) == webResults {
			break
		}
	}
	if len(kept) == 0 {
		return Result{Content: "No web pages matched.", Summary: "0 results"}, nil
	}
	res := Result{Summary: strconv.Itoa(len(kept)) + " results"}
	var b strings.Builder
	number := call.Number()
	for _, r := range kept {
		title := r.Title
		if title == "" {
			title = r.URL
		}
		src := &parleyv1.Source{
			Source: r.URL, Url: r.URL, Title: title, Chunk: r.Snippet, Excerpt: r.Snippet, DatasourceName: "web",
		}
		fmt.Fprintf(&b, "[%d] %s\n%s\n%s\n\n", number(src), title, r.URL, r.Snippet)
		res.Sources = append(res.Sources, src)
	}
	res.Content = strings.TrimSpace(b.String())
	return res, nil
}

// searxng speaks SearXNG's JSON API: GET /search?q=...&format=json.
type searxng struct {
	base string
	hc   *http.Client
}

func (*searxng) Backend() string { return "searxng" }

func (s *searxng) Search(ctx context.Context, query string, n int) ([]WebResult, error) {
	req, err := newRequest(ctx, http.MethodGet, s.base+"/search?"+url.Values{"q": {query}, "format": {"json"}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	var body struct {
		Results []struct {
			Title   string `json:"title"`
			URL     string `json:"url"`
			Content string `json:"content"`
		} `json:"results"`
	}
	if err := doJSON(s.hc, req, &body); err != nil {
		return nil, err
	}
	out := make([]WebResult, 0, n)
	for _, r := range body.Results {
		out = append(out, WebResult{Title: r.Title, URL: r.URL, Snippet: r.Content})
	}
	return out, nil
}

// brave speaks the Brave Search API: GET /res/v1/web/search with the
// subscription token in X-Subscription-Token.
type brave struct {
	base, key string
	hc        *http.Client
}

func (*brave) Backend() string { return "brave" }

func (b *brave) Search(ctx context.Context, query string, n int) ([]WebResult, error) {
	q := url.Values{"q": {query}, "count": {strconv.Itoa(n)}}
	req, err := newRequest(ctx, http.MethodGet, strings.TrimRight(b.base, "/")+"/res/v1/web/search?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Subscription-Token", b.key)
	var body struct {
		Web struct {
			Results []struct {
				Title       string `json:"title"`
				URL         string `json:"url"`
				Description string `json:"description"`
			} `json:"results"`
		} `json:"web"`
	}
	if err := doJSON(b.hc, req, &body); err != nil {
		return nil, err
	}
	out := make([]WebResult, 0, n)
	for _, r := range body.Web.Results {
		out = append(out, WebResult{Title: r.Title, URL: r.URL, Snippet: stripTags(r.Description)})
	}
	return out, nil
}

// tavily speaks the Tavily API: POST /search with a bearer key.
type tavily struct {
	base, key string
	hc        *http.Client
}

func (*tavily) Backend() string { return "tavily" }

func (t *tavily) Search(ctx context.Context, query string, n int) ([]WebResult, error) {
	payload, err := json.Marshal(map[string]any{"query": query, "max_results": n})
	if err != nil {
		return nil, err
	}
	req, err := newRequest(ctx, http.MethodPost, strings.TrimRight(t.base, "/")+"/search", bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+t.key)
	req.Header.Set("Content-Type", "application/json")
	var body struct {
		Results []struct {
			Title   string `json:"title"`
			URL     string `json:"url"`
			Content string `json:"content"`
		} `json:"results"`
	}
	if err := doJSON(t.hc, req, &body); err != nil {
		return nil, err
	}
	out := make([]WebResult, 0, n)
	for _, r := range body.Results {
		out = append(out, WebResult{Title: r.Title, URL: r.URL, Snippet: r.Content})
	}
	return out, nil
}

// searchReplyMax bounds a search backend's reply.
const searchReplyMax = 4 << 20

// statusError is a search backend's answer other than 2xx.
type statusError int

func (e statusError) Error() string { return "status " + strconv.Itoa(int(e)) }

// errUnreadable is a search backend's reply that is not the JSON expected.
var errUnreadable = errors.New("unreadable reply")

// searchFailure says what kind of failure a Search error was, naming no
// host, address or URL: what the model and visitors may read.
func searchFailure(err error) string {
	var status statusError
	var ne net.Error
	switch {
	case errors.As(err, &status):
		return "the search backend answered " + strconv.Itoa(int(status))
	case errors.Is(err, errUnreadable):
		return "the search backend's reply was unreadable"
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "the search backend did not answer in time"
	}
	return "the search backend could not be reached"
}

// sameHostRedirects follows a search backend's redirects within its own
// host (scheme and port included), at most 5. SECURITY: Go sends custom
// headers on (Brave's X-Subscription-Token) to whatever host a redirect
// names, and a 307 or 308 the body again (Tavily's); a redirect elsewhere
// is answered as its status, an error.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("stopped after 5 redirects")
	}
	if req.URL.Scheme != via[0].URL.Scheme || req.URL.Host != via[0].URL.Host {
		return http.ErrUseLastResponse
	}
	return nil
}

// newRequest is http.NewRequestWithContext for a search backend: its
// error, a backend URL that does not parse (a password's % or # not
// percent-encoded), quotes neither the URL, its password and the
// visitor's query with it, nor the piece url.Parse choked on. It is
// logged (webSearchTool.Run).
func newRequest(ctx context.Context, method, u string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, errors.New("the search backend's URL does not parse (a # or % in its password must be percent-encoded)")
	}
	return req, nil
}

// doJSON sends req and decodes a 2xx JSON reply into v. Errors name the
// status, never the request (it may carry a key); a transport error may
// name the backend's address (searchFailure says what is safe to show).
func doJSON(hc *http.Client, req *http.Request, v any) error {
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "Parley/1.0 (+https://github.com/parleyhq/parley)")
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may carry the query; the cause is enough
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return statusError(resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, searchReplyMax)).Decode(v); err != nil {
		return fmt.Errorf("%w: %w", errUnreadable, err)
	}
	return nil
}

// stripTags removes the <strong> highlights Brave puts in descriptions.
func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>' && in:
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
