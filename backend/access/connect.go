package access

import (
	"context"
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
