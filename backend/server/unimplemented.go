package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"
)

// unknownRPC answers a call of a method or service this server does not
// serve in the caller's own protocol: Connect, gRPC or gRPC-Web with the code
// unimplemented (Connect unary: 501 and a JSON error; gRPC: grpc-status 12),
// where the mux would answer plain 404 text and gRPC clients would report an
// unexpected content type. Other requests go to next, which serves mux.
// opts are the handlers' options (how much of a request they read).
func unknownRPC(mux *http.ServeMux, next http.Handler, opts ...connect.HandlerOption) http.Handler {
	fail := func(ctx context.Context) error {
		path, _ := ctx.Value(rpcPathKey{}).(string)
		return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("%s is not implemented", strings.TrimPrefix(path, "/")))
	}
	// The procedure names are placeholders: a connect handler serves any
	// path it is mounted at.
	const procedure = "/parley.v1.Unknown/Unknown"
	streams := connect.NewClientStreamHandler(procedure,
		func(ctx context.Context, _ *connect.ClientStream[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			return nil, fail(ctx)
		}, opts...)
	unary := connect.NewUnaryHandler(procedure,
		func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			return nil, fail(ctx)
		}, append(opts, connect.WithIdempotency(connect.IdempotencyNoSideEffects))...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := rpcKind(r)
		if kind == notRPC {
			next.ServeHTTP(w, r)
			return
		}
		if served(mux, r) {
			if checkRPCInput(w, r) {
				serveRPC(next, w, r, kind)
			}
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), rpcPathKey{}, r.URL.Path))
		if kind == streamRPC {
			streams.ServeHTTP(w, r)
			return
		}
		unary.ServeHTTP(w, r)
	})
}

type rpcPathKey struct{}

type rpcRequestKind int

const (
	notRPC rpcRequestKind = iota
	unaryRPC
	// streamRPC: gRPC, gRPC-Web and Connect streaming, which frame messages
	// (and errors) in the body.
	streamRPC
)

// rpcKind tells an RPC by its path, /package.Service/Method, and its
// content type (or, for Connect's GET, its encoding parameter).
func rpcKind(r *http.Request) rpcRequestKind {
	svc, method, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if !ok || !strings.Contains(svc, ".") || method == "" || strings.Contains(method, "/") {
		return notRPC
	}
	ct, _, _ := strings.Cut(strings.ToLower(r.Header.Get("Content-Type")), ";")
	switch ct = strings.TrimSpace(ct); {
	case ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc-web") ||
		strings.HasPrefix(ct, "application/connect+"):
		return streamRPC
	case r.Method == http.MethodPost && (ct == "application/json" || ct == "application/proto"):
		return unaryRPC
	case r.Method == http.MethodGet && r.URL.Query().Has("encoding"):
		return unaryRPC
	}
	return notRPC
}

// served reports whether the mux serves the RPC r calls: a handler is
// mounted for its service and, when the schema of that service is known,
// the method is one of it.
func served(mux *http.ServeMux, r *http.Request) bool {
	svc, method, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	// Mounted for its service, or the method on its own (a stream's
	// writeDeadlines).
	if _, pattern := mux.Handler(r); pattern != "/"+svc+"/" && pattern != r.URL.Path {
		return false
	}
	if methods, ok := unregistered[svc]; ok {
		return slices.Contains(methods, method)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if errors.Is(err, protoregistry.NotFound) {
		return true // let its handler answer
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	return ok && sd.Methods().ByName(protoreflect.Name(method)) != nil
}

// unregistered are the methods of the services mounted whose schema is not
// in the global registry: connect's health and reflection handlers.
var unregistered = map[string][]string{
	grpchealth.HealthV1ServiceName:        {"Check", "Watch"},
	grpcreflect.ReflectV1ServiceName:      {"ServerReflectionInfo"},
	grpcreflect.ReflectV1AlphaServiceName: {"ServerReflectionInfo"},
}
