package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/parleyhq/parley/backend/testenv"
)

// A method or service the server does not have is answered in the caller's
// protocol with the code unimplemented, never plain 404 text (which gRPC
// clients report as an unexpected content type).
func TestUnknownRPCIsUnimplemented(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	protocols := []struct {
		name string
		opts []connect.ClientOption
	}{
		{"connect proto", nil},
		{"connect json", []connect.ClientOption{connect.WithProtoJSON()}},
		{"connect get", []connect.ClientOption{connect.WithHTTPGet(), connect.WithIdempotency(connect.IdempotencyNoSideEffects)}},
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
	}
	for _, path := range []string{"/parley.v1.AgentService/Nope", "/parley.v1.Nope/X", "/grpc.health.v1.Health/Nope"} {
		for _, p := range protocols {
			c := connect.NewClient[emptypb.Empty, emptypb.Empty](testenv.H2C(), e.URL+path,
				append(p.opts, connect.WithInterceptors(testenv.Bearer(e.A.Key)))...)
			_, err := c.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{}))
			require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err), "%s %s: %v", p.name, path, err)
			require.Contains(t, err.Error(), strings.TrimPrefix(path, "/")+" is not implemented")

			if p.name == "connect get" {
				continue
			}
			stream, err := c.CallServerStream(context.Background(), connect.NewRequest(&emptypb.Empty{}))
			require.NoError(t, err)
			require.False(t, stream.Receive())
			require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(stream.Err()), "%s stream %s: %v", p.name, path, stream.Err())
			require.NoError(t, stream.Close())
		}
	}

	// On the wire, a Connect unary call gets Connect's error: 501, JSON.
	resp := e.Post("/parley.v1.AgentService/Nope", nil, `{}`)
	defer resp.Body.Close()
	require.Equal(t, http.StatusNotImplemented, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var body struct{ Code, Message string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, "unimplemented", body.Code)

	// What is not an RPC keeps the REST answer; served methods still work.
	r := e.Do("GET", "/parley.v1.Nope/X", "", nil)
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, "NOT_FOUND", r.Err(t).Error.Code)
	r = e.Do("POST", "/parley.v1.AgentService/ListAgents", e.A.Key, `{}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	health := connect.NewClient[emptypb.Empty, emptypb.Empty](testenv.H2C(), e.URL+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	_, err := health.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{}))
	require.NotEqual(t, connect.CodeUnimplemented, connect.CodeOf(err), "a served method: %v", err)
}
