package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

// A request whose every list item breaks a rule is answered with a bounded
// error: protovalidate reported every violation, so a keyless 800 KB Chat
// call (400,000 empty datasource ids, before any admission or rate limit)
// was answered 323 MB of error after 17 s, and over gRPC the error's
// trailers broke the connection (COMPRESSION_ERROR) rather than carry
// invalid_argument.
func TestViolationsAreBounded(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	chatReq := &parleyv1.ChatRequest{
		AgentId: "5f1d7c3e-8a2b-4c6d-9e0f-1a2b3c4d5e6f", Query: "hi", ConversationId: "c1", VisitorId: "v1",
		Filters: &parleyv1.ChatFilters{DatasourceIds: make([]string, 100_000)},
	}
	body, err := proto.Marshal(chatReq)
	require.NoError(t, err)
	// Connect, no key.
	resp, err := http.Post(e.URL+"/parley.v1.ChatService/Chat", "application/proto", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Less(t, len(got), 64<<10, "an error of %d bytes for a request of %d", len(got), len(body))
	require.Contains(t, string(got), "filters.datasource_ids")

	// gRPC: a status, not a broken connection; an admin key's list too.
	chat := parleyv1connect.NewChatServiceClient(testenv.H2C(), e.URL, connect.WithGRPC())
	_, err = chat.Chat(context.Background(), chatReq)
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, connect.CodeInvalidArgument, ce.Code(), "%v", err)
	require.Contains(t, ce.Message(), "filters.datasource_ids")

	tools := make([]string, 100_000)
	for i := range tools {
		tools[i] = "x"
	}
	agents := parleyv1connect.NewAgentServiceClient(testenv.H2C(), e.URL, connect.WithGRPC(), connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	_, err = agents.CreateAgent(context.Background(), &parleyv1.CreateAgentRequest{Name: "a", Instructions: "b", Tools: tools})
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, connect.CodeInvalidArgument, ce.Code(), "%v", err)
	require.Contains(t, ce.Message(), "tools")
	require.Less(t, len(ce.Message()), 4<<10)
}
