package chat_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

// A model that fails mid-answer ends a ChatStream with the error event and
// then the error's status in the trailers, as a failure to store the
// answer does: a client that reads the status (grpc-go's RecvMsg, a
// Connect client's Err) must not take a cut answer for a complete one.
func TestChatStreamMidAnswerFailureEndsWithItsStatus(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"Partial", " answer", " never", " finished"}, CutAfter: 2}
	}
	ctx := context.Background()
	for _, opt := range []struct {
		name   string
		client *http.Client
		opts   []connect.ClientOption
	}{
		{"connect", http.DefaultClient, nil},
		{"grpc-web", http.DefaultClient, []connect.ClientOption{connect.WithGRPCWeb()}},
		{"grpc via connect-go", testenv.H2C(), []connect.ClientOption{connect.WithGRPC()}},
	} {
		t.Run(opt.name, func(t *testing.T) {
			c := parleyv1connect.NewChatServiceClient(opt.client, f.URL, append(opt.opts, connect.WithInterceptors(testenv.Bearer(f.A.Key)))...)
			stream, err := c.ChatStream(ctx, &parleyv1.ChatRequest{AgentId: f.public, Query: "q", ConversationId: "cut-" + strings.ReplaceAll(opt.name, " ", "-"), VisitorId: "v"})
			require.NoError(t, err)
			var text strings.Builder
			var last *parleyv1.ChatStreamResponse
			for stream.Receive() {
				last = stream.Msg()
				text.WriteString(last.GetToken())
			}
			require.Equal(t, "Partial answer", text.String(), "%v", stream.Err())
			require.Equal(t, "UPSTREAM_ERROR", last.GetError().GetCode(), "the last event is the error event")
			require.Equal(t, connect.CodeUnavailable, connect.CodeOf(stream.Err()), "%v", stream.Err())
		})
	}
	t.Run("grpc-go", func(t *testing.T) {
		s := grpcChatStream(t, f, &parleyv1.ChatRequest{AgentId: f.private, Query: "q", ConversationId: "cut-grpc-go"})
		var sawError bool
		var err error
		for {
			m := new(parleyv1.ChatStreamResponse)
			if err = s.RecvMsg(m); err != nil {
				break
			}
			sawError = sawError || m.GetError() != nil
		}
		require.True(t, sawError)
		require.False(t, errors.Is(err, io.EOF), "the stream ended OK")
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	})
}
