package access

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/ratelimit"
)

// Interceptor admits Connect, gRPC and gRPC-Web calls by their method's
// rule, through the gate (the same path as the REST paths): the caller's
// principal is in the handler's context, and the rate-limit state in the
// response's headers or error metadata.
type Interceptor struct{ Gate *auth.Gate }

// admit applies procedure's rule. For methods open to public agents (and
// keyless calls of methods open to public forms) it admits nothing itself:
// the service does, per agent or form.
func (i Interceptor) admit(ctx context.Context, procedure, authorization string) (context.Context, auth.Admission, error) {
	rule, err := For(procedure)
	if err != nil {
		// SECURITY: deny by default: a method without a rule is not served.
		return ctx, auth.Admission{}, apperr.New(apperr.Forbidden, "this method is not open to callers")
	}
	if rule.SelfAdmitted(authorization) {
		// SECURITY: the service admits these calls itself (chat.Admitter,
		// form.Service).
		return ctx, auth.Admission{}, nil
	}
	adm, err := i.Gate.Admit(ctx, authorization, rule.Scope)
	if err != nil {
		return ctx, adm, err
	}
	return auth.WithPrincipal(ctx, adm.Principal), adm, nil
}

// WrapUnary implements connect.Interceptor.
func (i Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, adm, err := i.admit(ctx, req.Spec().Procedure, req.Header().Get("Authorization"))
		if err == nil {
			var resp connect.AnyResponse
			if resp, err = next(ctx, req); err == nil {
				ratelimit.WriteHeaders(resp.Header(), adm.Rate, time.Now())
				return resp, nil
			}
		}
		if cerr, ok := apperr.ToConnect(ctx, err).(*connect.Error); ok {
			ratelimit.WriteHeaders(cerr.Meta(), adm.Rate, time.Now())
			return nil, cerr
		}
		return nil, err
	}
}

// WrapStreamingClient implements connect.Interceptor.
func (Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (i Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, adm, err := i.admit(ctx, conn.Spec().Procedure, conn.RequestHeader().Get("Authorization"))
		ratelimit.WriteHeaders(conn.ResponseHeader(), adm.Rate, time.Now())
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// Keyed fronts next, the Connect handler of procedure, with the key check
// alone: a call whose key does not authenticate, or lacks the method's
// scope, is refused in its own protocol before next reads its body. The
// interceptor still admits (and counts) the calls let through.
//
// SECURITY: for a handler that holds an instance-wide resource while it
// reads the body (the datasources' upload budget): the interceptor runs
// only once the message is read, so keyless calls declaring large bodies
// and sending them slowly held the whole budget, every organization's
// uploads refused 503 meanwhile.
func Keyed(a *auth.Authenticator, procedure string, next http.Handler) http.Handler {
	rule := MustFor(procedure)
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		authorization := r.Header.Get("Authorization")
		if !rule.SelfAdmitted(authorization) {
			p, err := a.Authenticate(r.Context(), authorization)
			if err == nil && !p.Has(rule.Scope) {
				err = auth.Lacks(rule.Scope)
			}
			if err != nil {
				_ = errs.Write(w, r, apperr.ToConnect(r.Context(), err))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
