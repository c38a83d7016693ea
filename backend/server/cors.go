package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	connectcors "connectrpc.com/cors"
	"github.com/rs/cors"
)

// withCORS lets browser apps on the allowed origins call the RPC and REST
// paths: preflights are answered for any path, and the headers a client
// needs are allowed and exposed: Connect's, gRPC-Web's status headers,
// Authorization (API keys are bearer tokens, never cookies: credentials
// mode is not allowed, so the console's session cookie cannot ride along),
// the request id, the rate-limit headers and Retry-After. No origins: no
// CORS headers at all, as before.
func withCORS(origins []string, next http.Handler) http.Handler {
	if len(origins) == 0 {
		return next
	}
	return cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: append(connectcors.AllowedMethods(), http.MethodPut, http.MethodPatch, http.MethodDelete),
		AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization", "Accept", "X-Request-Id", "Last-Event-Id"),
		ExposedHeaders: append(connectcors.ExposedHeaders(),
			"X-Request-Id", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"),
		// Browsers cache a preflight for at most 2 h (Chromium).
		MaxAge: 7200,
	}).Handler(next)
}

// checkOrigin accepts "*", or an origin: http or https, a host (one "*"
// for any subdomain: https://*.example.com), an optional port, no path.
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(strings.Replace(o, "*.", "wildcard.", 1))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil || strings.Count(o, "*") > 1 {
		return fmt.Errorf("%q is not an origin: give scheme://host[:port], e.g. https://app.example.com, or *", o)
	}
	return nil
}
