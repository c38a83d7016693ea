package server

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/ratelimit"
)

// errorInterceptor maps every error a handler returns through apperr's one
// table, so that no internal detail reaches a client.
type errorInterceptor struct{}

func (errorInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		return resp, apperr.ToConnect(ctx, err)
	}
}

func (errorInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (errorInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return apperr.ToConnect(ctx, next(ctx, conn))
	}
}

// gateInterceptor admits Connect, gRPC and gRPC-Web calls through auth.Gate,
// the same path the REST handlers take.
type gateInterceptor struct {
	gate *auth.Gate
	// scope returns the scope a procedure needs.
	scope func(procedure string) auth.Scope
}

func (g gateInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		adm, err := g.gate.Admit(ctx, req.Header().Get("Authorization"), g.scope(req.Spec().Procedure))
		if err != nil {
			cerr := apperr.ToConnect(ctx, err).(*connect.Error)
			ratelimit.WriteHeaders(cerr.Meta(), adm.Rate, time.Now())
			return nil, cerr
		}
		resp, err := next(auth.WithPrincipal(ctx, adm.Principal), req)
		if err != nil {
			if cerr, ok := apperr.ToConnect(ctx, err).(*connect.Error); ok {
				ratelimit.WriteHeaders(cerr.Meta(), adm.Rate, time.Now())
				return nil, cerr
			}
			return nil, err
		}
		ratelimit.WriteHeaders(resp.Header(), adm.Rate, time.Now())
		return resp, nil
	}
}

func (g gateInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (g gateInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		adm, err := g.gate.Admit(ctx, conn.RequestHeader().Get("Authorization"), g.scope(conn.Spec().Procedure))
		ratelimit.WriteHeaders(conn.ResponseHeader(), adm.Rate, time.Now())
		if err != nil {
			return err
		}
		return next(auth.WithPrincipal(ctx, adm.Principal), conn)
	}
}

// procedureScope is the scope each procedure needs: today every service is
// management (admin); chat procedures will need the chat scope.
func procedureScope(string) auth.Scope { return auth.ScopeAdmin }
