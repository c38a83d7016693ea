package server

import (
	"net/http"
	"net/url"
	"strings"

	connectcors "connectrpc.com/cors"
	"github.com/rs/cors"

	"github.com/parleyhq/parley/backend/access"
	"github.com/parleyhq/parley/backend/origin"
)

// The headers browser clients need to read: Connect's and gRPC-Web's
// status headers, the request id, the rate-limit headers and Retry-After.
var exposedHeaders = append(connectcors.ExposedHeaders(),
	"X-Request-Id", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After")

// Browsers cache a preflight for at most 2 h (Chromium).
const preflightMaxAge = 7200

// withCORS lets browser apps call Parley across origins, in two tiers.
//
// The deployment's origins (--cors-origin) may call the RPC and REST paths
// with a key: preflights are answered for any path, Authorization is
// allowed (API keys are bearer tokens, never cookies: credentials mode is
// not allowed, so the console's session cookie cannot ride along), and the
// exposedHeaders are exposed.
//
// Any other origin may call a public agent's paths, and read and submit a
// published form, without a key, when the owner lists the origin
// (Agent.allowed_origins, Form.allowed_origins; "*" for any): its
// preflight is answered without allowing Authorization, and the request
// is marked for the chat admitter or the form service (origin.Admit,
// origin.AdmitForm), which refuses it with 403 or grants the response its
// CORS headers once the agent or form is known.
// Requests without Origin (servers, curl) and same-origin ones are not
// concerned.
func withCORS(origins []string, next http.Handler) http.Handler {
	listed := next
	if len(origins) > 0 {
		listed = cors.New(cors.Options{
			AllowedOrigins: origins,
			AllowedMethods: append(connectcors.AllowedMethods(), http.MethodPut, http.MethodPatch, http.MethodDelete),
			AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization", "Accept", "X-Request-Id", "Last-Event-Id"),
			ExposedHeaders: exposedHeaders,
			MaxAge:         preflightMaxAge,
		}).Handler(next)
	}
	visitors := cors.New(cors.Options{
		AllowOriginFunc: func(string) bool { return true },
		AllowedMethods:  []string{http.MethodGet, http.MethodPost, http.MethodPut},
		// SECURITY: no Authorization: a page on an origin the deployment
		// does not list cannot send a key, whatever an agent or form allows.
		AllowedHeaders: append(connectcors.AllowedHeaders(), "Accept", "X-Request-Id", "Last-Event-Id"),
		MaxAge:         preflightMaxAge,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := r.Header.Get("Origin")
		if o == "" || sameOrigin(o, r) || origin.Match(origins, o) || !publicPath(r) {
			listed.ServeHTTP(w, r)
			return
		}
		w.Header().Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			visitors.HandlerFunc(w, r)
			return
		}
		grant := func() {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", o)
			h.Set("Access-Control-Expose-Headers", strings.Join(exposedHeaders, ", "))
		}
		next.ServeHTTP(w, r.WithContext(origin.With(r.Context(), &origin.Request{Origin: o, Grant: grant})))
	})
}

// sameOrigin reports whether o is the origin the request was sent to (a
// browser sends Origin on a same-origin POST too).
func sameOrigin(o string, r *http.Request) bool {
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// publicPath reports whether r (or the request its preflight announces)
// reaches a public agent or a published form without a key.
func publicPath(r *http.Request) bool {
	method := r.Method
	if method == http.MethodOptions {
		method = r.Header.Get("Access-Control-Request-Method")
	}
	return publicAgentPath(r.URL.Path) || publicFormPath(method, r.URL.Path)
}

// publicFormPath reports whether a method call on p reaches a published
// form without a key: an RPC whose access rule admits keyless form
// callers (GetForm, SubmitForm), or its REST form (GET and POST
// /forms/{id}, not its submissions), with or without /api.
func publicFormPath(method, p string) bool {
	if strings.HasPrefix(p, "/parley.") {
		rule, err := access.For(strings.TrimPrefix(p, "/"))
		return err == nil && rule.PublicForms
	}
	p = strings.TrimPrefix(p, "/api")
	seg := strings.Split(strings.Trim(p, "/"), "/")
	return len(seg) == 2 && seg[0] == "forms" && seg[1] != "" && (method == http.MethodGet || method == http.MethodPost)
}

// publicAgentPath reports whether p reaches a public agent without a key:
// an RPC whose access rule admits public agents' visitors (chat, a
// visitor's conversation), or their REST forms (chat v1 and v2, the v2
// conversation paths), with or without /api.
func publicAgentPath(p string) bool {
	if strings.HasPrefix(p, "/parley.") {
		rule, err := access.For(strings.TrimPrefix(p, "/"))
		return err == nil && rule.PublicAgents
	}
	p = strings.TrimPrefix(p, "/api")
	seg := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(seg) == 4 && seg[0] == "v2" && seg[1] == "agent" && (seg[3] == "chat" || seg[3] == "conversations"):
		return true
	case len(seg) >= 2 && seg[0] == "v2" && seg[1] == "conversations":
		return true
	case len(seg) == 3 && seg[0] == "agents" && seg[2] == "query":
		return true
	}
	return false
}
