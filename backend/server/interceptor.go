package server

import (
	"context"

	"connectrpc.com/connect"

	"github.com/parleyhq/parley/backend/apperr"
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
