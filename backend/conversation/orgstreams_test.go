package conversation_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// An organization's keys hold at most --org-streams conversation streams
// open on an instance, all its keys together: the next is 429 naming the
// limit (Connect: resource_exhausted), one closed makes room again, and
// neither another organization's keys nor a visitor are counted with them.
// Unbounded, one key opened a stream a request, each held for an hour.
func TestOrgStreamsAreBounded(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	f := &fixture{Env: testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) { c.OrgStreams = 2 }), fake: fake}
	f.public = f.agent(t, `{"name":"Public","instructions":"i","visibility":"public"}`)
	f.private = f.agent(t, `{"name":"Private","instructions":"i"}`)
	keys := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(testenv.Bearer(f.A.Key)))
	k, err := keys.CreateApiKey(context.Background(), &parleyv1.CreateApiKeyRequest{Name: "second", Scopes: []string{"chat"}})
	require.NoError(t, err)
	f.chatKey = k.GetSecret()
	f.chat(t, f.private, f.A.Key, "os-1", "", "Hello")
	f.chat(t, f.public, "", "os-v", "ada", "Hello")

	const path = "/api/v2/conversations/os-1/events"
	auth := func(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
	first := follow(t, f.URL, path, auth(f.A.Key))
	follow(t, f.URL, path, auth(f.chatKey))

	opens := func(key string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return resp.StatusCode, ""
		}
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, body := opens(f.A.Key)
	require.Equal(t, http.StatusTooManyRequests, status, "%s", body)
	var eb struct {
		Error struct {
			Code, Message string
			RetryAfter    int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &eb), body)
	require.Equal(t, "RATE_LIMIT_EXCEEDED", eb.Error.Code)
	require.Contains(t, eb.Error.Message, "2 conversation streams")

	c := parleyv1connect.NewConversationServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(bearer(f.chatKey)))
	s, err := c.WatchConversation(context.Background(), &parleyv1.WatchConversationRequest{ConversationId: "os-1"})
	require.NoError(t, err)
	require.False(t, s.Receive())
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(s.Err()), "%v", s.Err())
	s.Close()

	// Another organization's key and a visitor are not counted with A's.
	status, body = opens(f.B.Key)
	require.Equal(t, http.StatusNotFound, status, "B reaches its own limit's check, not A's: %s", body)
	follow(t, f.URL, "/api/v2/conversations/os-v/events"+visitorQuery(f.public, "ada"), nil)

	first.resp.Body.Close()
	require.Eventually(t, func() bool { s, _ := opens(f.A.Key); return s == http.StatusOK }, 5*time.Second, 50*time.Millisecond)
}
