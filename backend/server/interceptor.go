package server

import (
	"context"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/reqinfo"
	"github.com/parleyhq/parley/compat/wire"
)

// observeInterceptor notes an RPC's procedure, span and outcome in the
// request's reqinfo.Info, for the request log line and metrics: a failed
// call is counted by its Connect code (and the status that code stands
// for), since over gRPC it travels behind an HTTP 200.
type observeInterceptor struct{}

func (observeInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		info := reqinfo.From(ctx)
		if info == nil {
			return next(ctx, req)
		}
		info.Route, info.Span = req.Spec().Procedure, trace.SpanContextFromContext(ctx)
		resp, err := next(ctx, req)
		noteCode(info, err)
		return resp, err
	}
}

func (observeInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (observeInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		info := reqinfo.From(ctx)
		if info == nil {
			return next(ctx, conn)
		}
		info.Route, info.Span = conn.Spec().Procedure, trace.SpanContextFromContext(ctx)
		err := next(ctx, conn)
		noteCode(info, err)
		return err
	}
}

func noteCode(info *reqinfo.Info, err error) {
	if err == nil {
		return
	}
	code := connect.CodeOf(err)
	info.Code, info.Status = code.String(), apperr.ConnectHTTPStatus(code)
}

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
		got, whole := 0, false
		err := next(ctx, receivedConn{conn, &got, &whole})
		return apperr.ToConnect(ctx, streamInputError(ctx, whole, err))
	}
}

// nulInterceptor refuses requests carrying U+0000 in any string, or nested
// deeper than wire.MaxDepth, as the REST paths do (wire.NoNUL):
// InvalidArgument naming the field.
type nulInterceptor struct{}

func (nulInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if m, ok := req.Any().(proto.Message); ok {
			if err := wire.NoNUL(m); err != nil {
				return nil, apperr.ToConnect(ctx, err)
			}
		}
		return next(ctx, req)
	}
}

func (nulInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (nulInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, nulConn{conn})
	}
}

type nulConn struct{ connect.StreamingHandlerConn }

func (c nulConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	if m, ok := msg.(proto.Message); ok {
		if err := wire.NoNUL(m); err != nil {
			return apperr.ToConnect(context.Background(), err)
		}
	}
	return nil
}
