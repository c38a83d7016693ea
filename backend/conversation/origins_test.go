package conversation_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// A visitor's stream opened from a page on an origin the agent's owner
// listed ends at its next heartbeat once the owner drops that origin,
// through any instance, as it ends once the agent is made private (it went
// on sending the conversation's replies for up to StreamLife, an hour,
// while every new request from that origin was refused).
func TestVisitorStreamsEndWhenTheirOriginIsDropped(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	beat := func(c *server.Config) { c.WatchHeartbeat = 100 * time.Millisecond }
	f := &fixture{Env: testenv.New(t, testenv.WithFakeModels(fake), beat), fake: fake}
	other := testenv.NewOn(t, f.DBURL, testenv.WithFakeModels(fake), beat)
	f.public = f.agent(t, `{"name":"Widget","instructions":"Be brief.","visibility":"public","allowedOrigins":["https://shop.example"]}`)
	f.chat(t, f.public, "", "from-shop", "ada", "hello")

	page := map[string]string{"Origin": "https://shop.example"}
	stream := follow(t, other.URL, "/api/v2/conversations/from-shop/events"+visitorQuery(f.public, "ada"), page)

	// The owner drops the origin through the first instance.
	r := f.Do("PUT", "/api/agents/"+f.public, f.A.Key, `{"allowedOrigins":["https://other.example"]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	// A new request from the page is refused at once on either instance...
	req, err := http.NewRequest(http.MethodGet, other.URL+"/api/v2/conversations/from-shop"+visitorQuery(f.public, "ada"), nil)
	require.NoError(t, err)
	req.Header.Set("Origin", "https://shop.example")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	// ...and the stream already open ends too.
	var last streamEvent
	for deadline := time.Now().Add(5 * time.Second); ; {
		require.True(t, time.Now().Before(deadline), "the stream from a dropped origin went on for 5 s")
		_, ev := stream.nextOrEnd(t)
		if ev == nil {
			break
		}
		last = *ev
	}
	require.Equal(t, "FORBIDDEN", last.Error.Code)

	// An agent made private through one instance is private on the other
	// at once: public agents are read per request, never cached.
	r = f.Do("PUT", "/api/agents/"+f.public, f.A.Key, `{"visibility":"private"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = other.Do("POST", "/api/v2/agent/"+f.public+"/chat", "", `{"query":"hi","conversationId":"from-shop","visitorId":"ada"}`)
	require.Equal(t, http.StatusUnauthorized, r.Status, "%s", r.Body)
}
