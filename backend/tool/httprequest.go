package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/netguard"
	"github.com/parleyhq/parley/backend/seal"
)

// HTTPRequest is the name of the tool that calls the agent owner's
// endpoints.
const HTTPRequest = "http_request"

var httpRequest = Registration{
	Name: HTTPRequest,
	Missing: func(d *Deps, p *Profile) string {
		switch {
		case d.Guard == nil:
			return "this server sends no outbound requests"
		case len(p.Settings.HTTPRequest.Endpoints) == 0:
			return "the agent has no endpoints (toolSettings.http_request.endpoints)"
		}
		return ""
	},
	New: func(d *Deps, t *Turn) Tool {
		return &httpRequestTool{guard: d.Guard, sealer: d.Sealer, org: t.Org, agent: t.Agent, endpoints: t.Settings.HTTPRequest.Endpoints}
	},
}

// HTTPRequestSettings are http_request's settings: the only endpoints it
// calls.
type HTTPRequestSettings struct {
	Endpoints []Endpoint `json:"endpoints,omitempty"`
}

// Endpoint is one endpoint of the agent's owner, as stored. Header values
// are secrets of the owner's: stored sealed, opened only to send a call,
// never returned by the API nor shown to the model.
type Endpoint struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Method      string `json:"method"`
	URL         string `json:"url"`
	// Sealed are the header values, by header name, each sealed by
	// SealHeader.
	Sealed map[string][]byte `json:"sealed_headers,omitempty"`
	// Legacy are header values stored in plain text before values were
	// sealed. They are still sent, so that nothing stored is lost, and the
	// agent's next update seals them (backend/agent); nothing writes them
	// any more.
	Legacy map[string]string `json:"headers,omitempty"`
}

// HeaderNames are the names of the endpoint's headers, sorted.
func (e Endpoint) HeaderNames() []string {
	names := slices.Collect(maps.Keys(e.Sealed))
	for name := range e.Legacy {
		if _, ok := e.Sealed[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// headerKind labels the bound of a sealed header value (seal.Bind).
const headerKind = "http_request header"

// headerBound binds a header value to its organization, agent, endpoint
// (its name and its URL's origin) and header name: a sealed value copied
// onto another row, endpoint or header does not open, nor does one left
// behind when the URL is changed to another origin in the database itself.
func headerBound(org, agent uuid.UUID, e Endpoint, header string) []byte {
	return seal.Bind(headerKind, org[:], agent[:], []byte(e.Name), []byte(Origin(e.URL)), []byte(header))
}

// SealHeader seals value for storage as header name of endpoint e (its
// Name and URL set) of agent of org.
func SealHeader(s *seal.Sealer, org, agent uuid.UUID, e Endpoint, name, value string) ([]byte, error) {
	return s.Seal([]byte(value), headerBound(org, agent, e, name))
}

// ResealHeaders seals the settings' stored header values of agent of org
// under s's current key, in place (`parley admin reseal`), counting each
// in t, and reports whether any was sealed anew. A value no key of s
// opens is left as it is and named in unopenable ("endpoint E, header
// H"), never its value.
func (st *Settings) ResealHeaders(s *seal.Sealer, org, agent uuid.UUID, t *seal.Tally) (changed bool, unopenable []string, err error) {
	for i := range st.HTTPRequest.Endpoints {
		e := &st.HTTPRequest.Endpoints[i]
		for _, name := range slices.Sorted(maps.Keys(e.Sealed)) {
			sealed, resealed, err := s.Reseal(e.Sealed[name], headerBound(org, agent, *e, name))
			opened, err := t.Add(resealed, err)
			if err != nil {
				return false, nil, err
			}
			if !opened {
				unopenable = append(unopenable, fmt.Sprintf("endpoint %q, header %s", e.Name, name))
			}
			if resealed {
				e.Sealed[name] = sealed
				changed = true
			}
		}
	}
	return changed, unopenable, nil
}

// headerValue is the value of e's header name to send: the sealed one
// opened, else a legacy plain one (s may then be nil). Only a call opens
// header values (httpRequestTool.Run).
func (e Endpoint) headerValue(s *seal.Sealer, org, agent uuid.UUID, name string) (string, error) {
	sealed, ok := e.Sealed[name]
	if !ok {
		return e.Legacy[name], nil
	}
	if s == nil {
		return "", errors.New("the server has no secrets key (--secrets-key)")
	}
	plain, err := s.Open(sealed, headerBound(org, agent, e, name))
	if err != nil {
		return "", fmt.Errorf("header %s: %w", name, err)
	}
	return string(plain), nil
}

// AcceptsBody reports whether the model may send the endpoint a JSON body.
func (e Endpoint) AcceptsBody() bool {
	return e.Method == http.MethodPost || e.Method == http.MethodPut || e.Method == http.MethodPatch
}

// Origin is a URL's scheme, host and port, lowercased and with the
// scheme's default port made explicit ("https://api.example.com:443"); ""
// when raw has none. Stored header values belong to an endpoint's origin:
// they are never sent to another.
func Origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// ForbiddenHeader reports whether an endpoint may not set header name: the
// ones the HTTP client owns.
func ForbiddenHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Te", "Trailer", "Keep-Alive",
		"Proxy-Authorization", "Proxy-Connection":
		return true
	}
	return false
}

// argsProblem says what is wrong with arguments encoding/json refused, in
// JSON's words: its own name Go's types ("cannot unmarshal array into Go
// value of type struct { Endpoint string ...}"), which the model, the
// visitor's tool_call event and the stored call would read.
func argsProblem(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field == "query" && te.Type.Kind() == reflect.String:
		return "query's values must be strings, not " + te.Value // a map's value: named by the map
	case errors.As(err, &te) && te.Field != "":
		return fmt.Sprintf("%s must be %s, not %s", te.Field, jsonKind(te.Type), te.Value)
	case errors.As(err, &te):
		return "they are " + te.Value + ", not an object"
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "they are not valid JSON"
	}
	return strings.TrimPrefix(err.Error(), "json: ") // an unknown field, named
}

// jsonKind names the JSON a Go type reads.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	}
	return "a number"
}

// queryName is a query parameter's name as servers may read it: PHP
// reads a name up to a NUL and without its leading spaces, turns "." and
// " " into "_", reads "a[]" and "a[x]" as "a" but "a[x" (no "]") as "a_x",
// and some frameworks ignore case. A parameter of the model's that one of
// the endpoint's own reads so (a tenant id, say) is left out, as one of
// the same name is: the server might take the model's value for the
// owner's. Case is ignored as Unicode's mappings ignore it, upper case
// first: Java's case-insensitive order and ASP.NET's OrdinalIgnoreCase
// compare upper cases, where "ıd" (a dotless i) is "ID" and, for Java,
// "ſcope" (a long s) is "SCOPE"; lower case alone keeps them apart.
func queryName(k string) string {
	if i := strings.IndexByte(k, 0); i >= 0 {
		k = k[:i]
	}
	k = strings.TrimLeft(k, " ")
	if i := strings.IndexByte(k, '['); i > 0 {
		if strings.IndexByte(k[i:], ']') > 0 {
			k = k[:i]
		} else {
			k = strings.ReplaceAll(k, "[", "_")
		}
	}
	return strings.NewReplacer(".", "_", " ", "_").Replace(strings.ToLower(strings.ToUpper(k)))
}

// ValidHeaderValue reports whether value can be sent as a header value:
// Go's HTTP client refuses one holding a control character other than a
// tab (RFC 9110 §5.5), and then no call to the endpoint is ever sent.
func ValidHeaderValue(value string) bool {
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// Limits of one call: NewGuard's client enforces the time and the size
// read; the model reads at most httpBodyForModel bytes of it.
const (
	HTTPTimeout      = 10 * time.Second
	HTTPMaxBytes     = 1 << 20
	httpBodyForModel = 16 << 10
	// httpHeaderForModel bounds each response header the model reads
	// (Content-Type, a redirect's Location): the body's bound is no bound
	// if a header of the endpoint's can carry megabytes into the prompt.
	httpHeaderForModel = 1 << 10
)

// NewGuard is the client http_request's calls go through (Deps.Guard):
// netguard with a call's bounds, following no redirect.
//
// SECURITY: a redirect is not followed, whatever its target. Following
// one, Go's client sends the request's headers again (it drops only
// Authorization, Cookie and WWW-Authenticate when the host changes), so an
// endpoint's configured X-Api-Key would go to whatever host the endpoint's
// server, or whoever controls it, points at; it adds a Referer holding the
// endpoint's URL with the owner's query parameters; and it follows https to
// http, sending both in clear. Following only redirects within the
// endpoint's origin would be sound too, but it is a rule of our own to get
// right for little gain: the owner configures the URL the service answers
// at. The 3xx is the call's result instead (see redirected).
func NewGuard(cfg netguard.Config) *netguard.Client {
	cfg.Timeout, cfg.MaxBytes, cfg.NoRedirects = HTTPTimeout, HTTPMaxBytes, true
	return netguard.New(cfg)
}

// httpRequestTool is http_request for one turn: the agent's endpoints, by
// name only. The model never gives a URL: prompt injection (a web page that
// asks it to call somewhere else) can reach nothing the owner did not list.
type httpRequestTool struct {
	guard *netguard.Client
	// sealer opens the endpoints' header values, which are bound to org
	// and agent.
	sealer     *seal.Sealer
	org, agent uuid.UUID
	endpoints  []Endpoint
}

func (*httpRequestTool) Name() string { return HTTPRequest }

func (h *httpRequestTool) Description() string {
	var b strings.Builder
	b.WriteString("Call one of this assistant's HTTP endpoints, by name, and read its status and response. The endpoints:")
	for _, e := range h.endpoints {
		b.WriteString("\n- " + e.Name + " (" + e.Method)
		if e.AcceptsBody() {
			b.WriteString(", takes a JSON body")
		}
		b.WriteString(")")
		if e.Description != "" {
			b.WriteString(": " + e.Description)
		}
	}
	return b.String()
}

func (h *httpRequestTool) Parameters() map[string]any {
	names := make([]string, 0, len(h.endpoints))
	body := false
	for _, e := range h.endpoints {
		names = append(names, e.Name)
		body = body || e.AcceptsBody()
	}
	props := map[string]any{
		"endpoint": map[string]any{"type": "string", "enum": names, "description": "The endpoint to call."},
		"query": map[string]any{
			"type": "object", "additionalProperties": map[string]any{"type": "string"},
			"description": "Query parameters to add to the endpoint's URL.",
		},
	}
	if body {
		props["body"] = map[string]any{"type": "object", "description": "The JSON body, for endpoints that take one."}
	}
	return map[string]any{"type": "object", "properties": props, "required": []string{"endpoint"}, "additionalProperties": false}
}

func (*httpRequestTool) Traits() Traits { return Traits{} }

func (h *httpRequestTool) Run(ctx context.Context, call Call) (Result, error) {
	var args struct {
		Endpoint string            `json:"endpoint"`
		Query    map[string]string `json:"query"`
		Body     json.RawMessage   `json:"body"`
	}
	dec := json.NewDecoder(strings.NewReader(call.Arguments))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&args); err != nil {
		return Errorf(`the arguments must be a JSON object with "endpoint" (one of the endpoint names) and optionally "query" (an object of strings) and "body": %s`, argsProblem(err)), nil
	}
	i := slices.IndexFunc(h.endpoints, func(e Endpoint) bool { return e.Name == args.Endpoint })
	if i < 0 {
		names := make([]string, 0, len(h.endpoints))
		for _, e := range h.endpoints {
			names = append(names, e.Name)
		}
		// SECURITY: only the owner's endpoints, whatever the model was told.
		return Errorf("unknown endpoint %q; the endpoints are: %s", args.Endpoint, strings.Join(names, ", ")), nil
	}
	e := h.endpoints[i]
	hasBody := len(args.Body) > 0 && string(args.Body) != "null"
	if hasBody && !e.AcceptsBody() {
		return Errorf("endpoint %s (%s) takes no body", e.Name, e.Method), nil
	}
	u, err := url.Parse(e.URL)
	if err != nil {
		return Errorf("endpoint %s has an invalid URL", e.Name), nil
	}
	if len(args.Query) > 0 {
		// The owner's parameters stay as configured, byte for byte; the
		// model's are added after them. A configured query that does not
		// parse (a ";" in it) takes none: which names it holds is unsure.
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return Errorf("endpoint %s takes no query parameters", e.Name), nil
		}
		owner := map[string]bool{}
		for k := range q {
			owner[queryName(k)] = true
		}
		add := url.Values{}
		for k, v := range args.Query {
			if !owner[queryName(k)] {
				add.Set(k, v)
			}
		}
		if extra := add.Encode(); extra != "" {
			if u.RawQuery != "" {
				u.RawQuery += "&"
			}
			u.RawQuery += extra
		}
	}
	r := netguard.Request{Method: e.Method, URL: u.String(), Header: http.Header{"Accept": {"application/json, text/*;q=0.9, */*;q=0.5"}}}
	// The header values are opened here only, for this request.
	var sent []string
	for _, name := range e.HeaderNames() {
		v, err := e.headerValue(h.sealer, h.org, h.agent, name)
		if err != nil {
			slog.WarnContext(ctx, "http_request: an endpoint's header value cannot be opened", "org", h.org, "agent", h.agent, "endpoint", e.Name, "err", err)
			return Errorf("endpoint %s was not called: this server cannot read its stored header values (the assistant's owner may need to set them again)", e.Name), nil
		}
		r.Header.Set(name, v)
		if !publicHeader(name) {
			sent = append(sent, v)
		}
	}
	// SECURITY: so are the values of the owner's query parameters (an
	// api_key in the URL), which the model is never shown either (see
	// redirected): an endpoint may echo the URL it was called at.
	sent = append(sent, ownerQueryValues(e.URL)...)
	hide := redactor(sent)
	if hasBody {
		r.Body = args.Body
		r.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.guard.Send(ctx, r)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
			return Result{}, ctx.Err()
		}
		return Errorf("%s", sendError(e.Name, err)), nil
	}
	status := strconv.Itoa(resp.Status) + " " + http.StatusText(resp.Status)
	if loc := resp.Header.Get("Location"); resp.Status >= 300 && resp.Status < 400 && loc != "" {
		res := redirected(e.Name, u, status, hide.Replace(loc))
		res.Content = hide.Replace(res.Content)
		return res, nil
	}
	// SECURITY: what the endpoint says back of the header values sent (an
	// echo of the request, an error quoting the key it refused) is cut out
	// before the model reads it, the whole body first so that no part of
	// a value survives the model's cut: the values are the owner's secrets,
	// and a model steered by a page or a visitor repeats what it read.
	resp.Body = []byte(hide.Replace(string(resp.Body)))
	res := Result{
		Content: "HTTP " + status + "\nContent-Type: " + clip(hide.Replace(resp.Header.Get("Content-Type")), httpHeaderForModel) + "\n\n" + bodyForModel(resp),
		IsError: resp.Status >= 400,
		Summary: strings.TrimSpace(status) + ", " + sizeOf(resp),
	}
	return res, nil
}

// ownerQueryValues are the values of the query parameters of the
// endpoint's URL, as configured: as the owner wrote them (percent-encoded)
// and decoded, for those that decode.
func ownerQueryValues(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.RawQuery == "" {
		return nil
	}
	var out []string
	for _, pair := range strings.FieldsFunc(u.RawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		_, v, _ := strings.Cut(pair, "=")
		out = append(out, v)
		if d, err := url.QueryUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
	}
	return out
}

// redactedValue replaces a header value sent in what the model reads.
const redactedValue = "[redacted]"

// minSecret is the shortest header value (or word of one) cut out of a
// response: a shorter one is no secret, and cutting it would garble the
// response ("1", "en", the "Bearer" of "Bearer <token>").
const minSecret = 8

// publicHeader reports whether a configured header carries no secret
// (what to accept, the client's name), whose value a response may repeat.
func publicHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Accept", "Accept-Language", "Accept-Encoding", "Content-Type", "User-Agent":
		return true
	}
	return false
}

// redactor cuts the header values sent out of a response: each whole, and
// each word of one (the token of "Bearer <token>"), as it is and as a
// response quotes it (quotedForms), longest first.
func redactor(values []string) *strings.Replacer {
	var words []string
	for _, v := range values {
		words = append(words, strings.TrimSpace(v))
		words = append(words, strings.Fields(v)...)
	}
	words = slices.DeleteFunc(words, func(s string) bool { return len(s) < minSecret })
	var secrets []string
	for _, w := range words {
		secrets = append(secrets, quotedForms(w)...)
	}
	slices.SortFunc(secrets, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	secrets = slices.Compact(secrets)
	var pairs []string
	for _, s := range secrets {
		pairs = append(pairs, s, redactedValue)
	}
	return strings.NewReplacer(pairs...)
}

// quotedForms are the forms a value takes in a response that quotes it: as
// it is, in a JSON string (where Go's encoder escapes <, > and &, and PHP's
// /: a base64 key holds slashes), and percent-encoded in a URL. Cut out as
// it is only, a key an echo endpoint returned as "abc\/def" reached the
// model whole.
func quotedForms(v string) []string {
	out := []string{v, url.QueryEscape(v), url.PathEscape(v)}
	for _, html := range []bool{false, true} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(v) != nil {
			continue
		}
		j := strings.TrimSuffix(b.String(), "\n")
		j = j[1 : len(j)-1]
		out = append(out, j, strings.ReplaceAll(j, "/", `\/`))
	}
	return out
}

// redirected is the result of a call answered by a redirect, which the
// guard does not follow (NewGuard): an error, giving the model the status
// and where it points, its query and fragment left out (a redirect from
// http to https repeats the owner's parameters, which the model is never
// shown).
func redirected(name string, from *url.URL, status, location string) Result {
	where := "(an invalid URL)"
	if to, err := from.Parse(location); err == nil {
		to.User, to.RawQuery, to.ForceQuery, to.Fragment, to.RawFragment = nil, "", false, "", ""
		where = clip(to.String(), httpHeaderForModel)
	}
	content := "HTTP " + status + "\nLocation: " + where + " (query left out)\n\n" +
		"Endpoint " + name + " redirected elsewhere; http_request does not follow redirects, so this endpoint gave no answer. " +
		"The assistant's owner can set the endpoint's URL to the new address."
	return Result{Content: content, IsError: true, Summary: strings.TrimSpace(status) + ", not followed"}
}

// sendError says why a call got no response, naming the endpoint, not its
// URL (which may carry the owner's parameters).
func sendError(name string, err error) string {
	var ue *url.Error
	switch {
	case netguard.Blocked(err):
		return "endpoint " + name + " was refused: its address is not public"
	case errors.As(err, &ue) && ue.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return "endpoint " + name + " did not answer within 10 s"
	}
	return "endpoint " + name + " could not be reached"
}

// bodyForModel is the start of a response body the model may read: text,
// at most httpBodyForModel bytes.
func bodyForModel(r *netguard.Response) string {
	b := r.Body
	if len(b) == 0 {
		return "(empty body)"
	}
	cut := len(b) > httpBodyForModel
	if cut {
		b = b[:httpBodyForModel]
		// Back off a character cut in half.
		for i := 0; i < utf8.UTFMax-1 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
		return fmt.Sprintf("(a binary body of %s)", sizeOf(r))
	}
	out := string(b)
	if cut || r.Truncated {
		out += fmt.Sprintf("\n… (the body was cut at %d KiB of %s)", httpBodyForModel>>10, sizeOf(r))
	}
	return out
}

func sizeOf(r *netguard.Response) string {
	if r.Truncated {
		return "more than " + strconv.Itoa(HTTPMaxBytes>>20) + " MiB"
	}
	return strconv.Itoa(len(r.Body)) + " bytes"
}
