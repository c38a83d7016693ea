package access

import (
	"net/http"
	"time"

	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/ratelimit"
)

// Middleware admits a REST request by the rule of the method it fronts
// (procedure, e.g. parleyv1connect.AgentServiceListAgentsProcedure), then
// runs fn with the principal in its context. Refusals are written by
// writeError in the REST error shape, with the rate-limit headers.
func Middleware(gate *auth.Gate, procedure string, writeError func(http.ResponseWriter, *http.Request, error), fn http.HandlerFunc) http.HandlerFunc {
	rule := MustFor(procedure)
	return func(w http.ResponseWriter, r *http.Request) {
		if rule.SelfAdmitted(r.Header.Get("Authorization")) {
			// SECURITY: admitted per agent or form by the handler.
			fn(w, r)
			return
		}
		adm, err := gate.Admit(r.Context(), r.Header.Get("Authorization"), rule.Scope)
		ratelimit.WriteHeaders(w.Header(), adm.Rate, time.Now())
		if err != nil {
			writeError(w, r, err)
			return
		}
		fn(w, r.WithContext(auth.WithPrincipal(r.Context(), adm.Principal)))
	}
}
