package conversation_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

// A conversation is deleted, with its messages, by an admin key of its
// organization, over REST and Connect; a chat key, a visitor and another
// organization cannot; the same id then starts a new conversation.
func TestDeleteConversation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.chat(t, f.private, f.A.Key, "gone-1", "", "Please forget me")
	f.chat(t, f.private, f.A.Key, "kept-1", "", "Keep this")
	f.chat(t, f.public, "", "visit-1", "v1", "Hello")
	rb := f.Do("POST", "/api/agents", f.B.Key, `{"name":"B","instructions":"b"}`)
	var bAgent struct{ ID string }
	rb.JSON(t, &bAgent)
	f.chat(t, bAgent.ID, f.B.Key, "gone-1", "", "B's own")

	for _, c := range []struct {
		name, key, path string
		status          int
	}{
		{"a chat key", f.chatKey, "gone-1", 403},
		{"a visitor", "", "visit-1" + visitorQuery(f.public, "v1"), 401},
		{"unknown", f.A.Key, "nope", 404},
	} {
		r := f.Do("DELETE", "/api/v2/conversations/"+c.path, c.key, nil)
		require.Equal(t, c.status, r.Status, "%s: %s", c.name, r.Body)
	}
	require.Equal(t, 200, f.Do("GET", "/api/v2/conversations/gone-1", f.A.Key, nil).Status, "a refused delete deleted")

	r := f.Do("DELETE", "/api/v2/conversations/gone-1", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.JSONEq(t, `{"id":"gone-1","deleted":true}`, string(r.Body))
	require.Equal(t, 404, f.Do("GET", "/api/v2/conversations/gone-1", f.A.Key, nil).Status)
	require.Equal(t, 404, f.Do("DELETE", "/api/v2/conversations/gone-1", f.A.Key, nil).Status, "deleted once")
	var l listing
	f.Do("GET", "/api/v2/conversations?agentId="+f.private, f.A.Key, nil).JSON(t, &l)
	require.Equal(t, []string{"kept-1"}, ids(l), "only that conversation")
	var d detail
	r = f.Do("GET", "/api/v2/conversations/gone-1", f.B.Key, nil)
	require.Equal(t, 200, r.Status, "B's own gone-1 stays")
	r.JSON(t, &d)
	require.Equal(t, "B's own", d.Messages[0].Text)

	// Its messages went with it: the same id starts afresh.
	f.chat(t, f.private, f.A.Key, "gone-1", "", "A new start")
	f.Do("GET", "/api/v2/conversations/gone-1", f.A.Key, nil).JSON(t, &d)
	require.Len(t, d.Messages, 2)
	require.Equal(t, "A new start", d.Messages[0].Text)

	// Over Connect.
	convs := parleyv1connect.NewConversationServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(testenv.Bearer(f.A.Key)))
	_, err := convs.DeleteConversation(context.Background(), &parleyv1.DeleteConversationRequest{ConversationId: "kept-1"})
	require.NoError(t, err)
	_, err = convs.GetConversation(context.Background(), &parleyv1.GetConversationRequest{ConversationId: "kept-1"})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
}

// A conversation deleted while chat turns continue it: each turn either
// lands before the deletion or ends with 404, and the deletion either
// finds it or, once a turn made it anew, deletes that; never a 500 or a
// deadlock.
func TestDeleteConversationRacesTurns(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 30 {
		conv := fmt.Sprintf("race-%d", i)
		f.chat(t, f.private, f.A.Key, conv, "", "first")
		reqs := [][3]any{{"DELETE", "/api/v2/conversations/" + conv, nil}}
		for range 2 {
			reqs = append(reqs, [3]any{"POST", "/api/v2/agent/" + f.private + "/chat", map[string]any{"query": "more", "conversationId": conv}})
		}
		resps := f.concurrently(f.A.Key, reqs...)
		require.Equal(t, 200, resps[0].Status, "iteration %d, the deletion: %s", i, resps[0].Body)
		for n := 1; n < len(resps); n++ {
			if resps[n].Status != 200 {
				require.Equal(t, 404, resps[n].Status, "iteration %d, turn %d: %s", i, n, resps[n].Body)
			}
		}
	}
}

// An agent and its conversations deleted at once: each conversation's
// deletion takes the agent first, as the agent's does, so the two never
// deadlock on the conversations or their kept usage (migration 00024);
// a conversation's deletion either lands first or finds it gone (404).
func TestDeleteConversationRacesDeleteAgent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 15 {
		r := f.Do("POST", "/api/agents", f.A.Key, `{"name":"Doomed","instructions":"a","model":"gpt-4o-mini"}`)
		require.Equal(t, 201, r.Status, "%s", r.Body)
		var a struct{ ID string }
		r.JSON(t, &a)
		convs := []string{fmt.Sprintf("x-%d-a", i), fmt.Sprintf("x-%d-b", i), fmt.Sprintf("x-%d-c", i)}
		for _, c := range convs {
			f.chat(t, a.ID, f.A.Key, c, "", "hello")
		}
		reqs := [][3]any{{"DELETE", "/api/agents/" + a.ID, nil}}
		for _, c := range convs {
			reqs = append(reqs, [3]any{"DELETE", "/api/v2/conversations/" + c, nil})
		}
		resps := f.concurrently(f.A.Key, reqs...)
		require.Equal(t, 200, resps[0].Status, "iteration %d, the agent: %s", i, resps[0].Body)
		for n := 1; n < len(resps); n++ {
			if resps[n].Status != 200 {
				require.Equal(t, 404, resps[n].Status, "iteration %d, conversation %d: %s", i, n, resps[n].Body)
			}
		}
	}
}

// concurrently sends the requests (method, path, body) with key at once,
// after a barrier, and returns their responses in order.
func (f *fixture) concurrently(key string, reqs ...[3]any) []testenv.Response {
	resps := make([]testenv.Response, len(reqs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for n, rq := range reqs {
		wg.Go(func() {
			<-start
			resps[n] = f.Do(rq[0].(string), rq[1].(string), key, rq[2])
		})
	}
	close(start)
	wg.Wait()
	return resps
}
