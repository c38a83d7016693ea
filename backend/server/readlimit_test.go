package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/parleyhq/parley/backend/testenv"
)

// A gzip message over the limit is refused once it has inflated to the
// limit, by every handler the server has and in every protocol, before
// any key is asked for. The health, reflection and unknown-method handlers
// had no limit: 200 KiB of gzip to grpc.health.v1.Health/Check took
// 512 MiB of memory. And the services inflated the rest of a message over
// the limit to report its size ("message size N"): 27 MiB of gzip to a
// DatastoreService method inflated 28 GB, five seconds of a core.
func TestGzipMessageInflatesNoFurtherThanTheLimit(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	// Field 1, a string, as grpc.health.v1.HealthCheckRequest's service
	// is; 32 MiB (over a datasource's limit too) that gzip sends in 32 KiB.
	huge := wrapperspb.String(strings.Repeat("a", 32<<20))
	protocols := []struct {
		name string
		opts []connect.ClientOption
	}{
		{"connect", nil},
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
	}
	for _, path := range []string{"/grpc.health.v1.Health/Check", "/parley.v1.Nope/X", "/parley.v1.AgentService/ListAgents", "/parley.v1.DatastoreService/ListDatastores"} {
		for _, p := range protocols {
			if path == "/parley.v1.Nope/X" && p.name != "connect" {
				continue // answered unimplemented without reading the message
			}
			c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](testenv.H2C(), e.URL+path, append(p.opts, connect.WithSendGzip())...)
			_, err := c.CallUnary(context.Background(), connect.NewRequest(huge))
			msg := fmt.Sprint(err)
			msg = msg[:min(len(msg), 200)]
			require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%s %s: %s", p.name, path, msg)
			// connect-go names a message's size once it inflated all of it.
			require.NotRegexp(t, `message size [0-9]`, msg, "%s %s", p.name, path)
		}
	}

	// A gzip message within the limit is read: a health check, and a
	// DatastoreService message over the others' limit, within a
	// datasource's (read whole, then refused for want of a key).
	c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](testenv.H2C(), e.URL+"/grpc.health.v1.Health/Check", connect.WithGRPC(), connect.WithSendGzip())
	_, err := c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("parley.v1.AgentService")))
	require.NoError(t, err)
	c = connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](testenv.H2C(), e.URL+"/parley.v1.DatastoreService/ListDatastores", connect.WithSendGzip())
	_, err = c.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String(strings.Repeat("a", 2<<20))))
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
}
