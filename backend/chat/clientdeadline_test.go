package chat_test

import (
	"bufio"
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// providerTimeouts reads parley_provider_errors_total{provider="openai",kind="timeout"}.
func providerTimeouts(t *testing.T, f *fixture) float64 {
	t.Helper()
	h, err := f.App.MetricsHandler()
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "parley_provider_errors_total{") && strings.Contains(line, `kind="timeout"`) && strings.Contains(line, `provider="openai"`) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			require.NoError(t, err)
			return v
		}
	}
	return 0
}

// A gRPC client's own deadline (grpc-timeout) bounds its turn: the call
// ends with DeadlineExceeded when the client gives up, the turn's slot is
// freed, what was generated is stored marked incomplete, and the provider,
// which was answering, is not counted as having timed out (the alert on
// parley_provider_errors_total would fire on clients' deadlines).
// The turn's own deadline still counts as the provider's timeout. Not
// parallel: it reads a process-wide counter.
func TestClientDeadlineOverGRPC(t *testing.T) {
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) { c.TurnTimeout = 2 * time.Second })
	f := &fixture{Env: e, fake: fake}
	f.private = f.agent(t, `{"name":"Slow","instructions":"i"}`)
	fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"tick "}, Delay: 100 * time.Millisecond, Forever: true}
	}
	before := providerTimeouts(t, f)

	conn := testenv.GRPC(t, f.URL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+f.A.Key)
	err := conn.Invoke(ctx, "/parley.v1.ChatService/Chat",
		&parleyv1.ChatRequest{AgentId: f.private, Query: "q", ConversationId: "grpc-deadline"}, new(parleyv1.ChatResponse))
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)

	var msgs []storedMessage
	require.Eventually(t, func() bool {
		msgs = messagesOf(t, f, "grpc-deadline")
		return len(msgs) == 2 && e.App.TurnQueue().Running() == 0
	}, 5*time.Second, 50*time.Millisecond, "the turn ends and stores its answer: %+v", msgs)
	require.Equal(t, "q", msgs[0].Content)
	require.True(t, msgs[1].Incomplete)
	require.Contains(t, msgs[1].Content, "tick")
	require.Equal(t, before, providerTimeouts(t, f), "a client's deadline is not the provider's timeout")

	// The turn's own deadline (--turn-timeout) is.
	err = conn.Invoke(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+f.A.Key), "/parley.v1.ChatService/Chat",
		&parleyv1.ChatRequest{AgentId: f.private, Query: "q", ConversationId: "turn-deadline"}, new(parleyv1.ChatResponse))
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	require.Equal(t, before+1, providerTimeouts(t, f))
}
