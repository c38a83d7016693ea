package conversation_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

// People act on one conversation at once: replies, resolutions and
// take-overs, while a stream follows it. Every reply is stored and sent
// once, the events are numbered without gap or repeat, and each status
// change is one event (a second resolve in a row records none).
func TestPeopleActAtOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.chat(t, f.public, "", "busy-1", "ada", "Hello")
	owner := follow(t, f.URL, "/api/v2/conversations/busy-1/events", map[string]string{"Authorization": "Bearer " + f.A.Key, "Last-Event-ID": "2"})
	var reqs [][3]any
	for i := range 8 {
		reqs = append(reqs, [3]any{"POST", "/api/v2/conversations/busy-1/messages", fmt.Sprintf(`{"text":"reply %d"}`, i)})
		if i%3 == 0 {
			reqs = append(reqs, [3]any{"PUT", "/api/v2/conversations/busy-1", `{"status":"resolved"}`})
		}
	}
	for i, r := range f.concurrently(f.A.Key, reqs...) {
		want := http.StatusCreated
		if reqs[i][0] == "PUT" {
			want = http.StatusOK
		}
		require.Equal(t, want, r.Status, "%v: %s", reqs[i], r.Body)
	}
	// Twice resolved in a row: one event.
	require.Equal(t, 200, f.Do("PUT", "/api/v2/conversations/busy-1", f.A.Key, `{"status":"resolved"}`).Status)
	require.Equal(t, 200, f.Do("PUT", "/api/v2/conversations/busy-1", f.A.Key, `{"status":"resolved"}`).Status)

	var d detail
	r := f.Do("GET", "/api/v2/conversations/busy-1", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &d)
	require.Len(t, d.Messages, 2+8)
	replies := map[string]int{}
	statuses := []string{}
	for id := int64(3); id <= d.LastEventID; id++ {
		ev, se := owner.next(t)
		require.Equal(t, fmt.Sprint(id), ev.LastEventID, "events in order, without gap: %s", ev.Data)
		switch se.Type {
		case "message":
			require.Equal(t, "human", se.Message.Role)
			replies[se.Message.Text]++
		case "status":
			if len(statuses) > 0 {
				require.NotEqual(t, statuses[len(statuses)-1], se.Status, "a status event without a change")
			}
			statuses = append(statuses, se.Status)
		default:
			t.Fatalf("unexpected event %s", ev.Data)
		}
	}
	require.Len(t, replies, 8)
	for text, n := range replies {
		require.Equal(t, 1, n, text)
	}
	require.Equal(t, "resolved", statuses[len(statuses)-1])
	require.Equal(t, "resolved", d.Status)
}

// Bad input to people's replies, status changes, listings and streams is a
// 400 naming the field, over REST and Connect, never a 500.
func TestPeopleBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.chat(t, f.public, "", "bad-1", "ada", "Hello")
	long := strings.Repeat("é", 32001)
	for _, tc := range []struct {
		method, path, body, field string
	}{
		{"POST", "/api/v2/conversations/bad-1/messages", `{"text":"` + long + `"}`, "text"},
		{"POST", "/api/v2/conversations/bad-1/messages", `{"text":""}`, "text"},
		{"POST", "/api/v2/conversations/bad-1/messages", `{"text":"\n\t "}`, "text"},
		{"POST", "/api/v2/conversations/bad-1/messages", `{"text":5}`, "text"},
		{"POST", "/api/v2/conversations/" + strings.Repeat("x", 201) + "/messages", `{"text":"hi"}`, "conversationId"},
		{"PUT", "/api/v2/conversations/bad-1", `{"status":"resolved","reason":"` + strings.Repeat("r", 501) + `"}`, "reason"},
		{"PUT", "/api/v2/conversations/bad-1", `{"status":"RESOLVED"}`, "status"},
		{"GET", "/api/v2/conversations?cursor=garbage", ``, "cursor"},
		{"GET", "/api/v2/conversations?cursor=1_", ``, "cursor"},
		{"GET", "/api/v2/conversations?status=open", ``, "status"},
		{"GET", "/api/v2/conversations/bad-1/events?lastEventId=-1", ``, "lastEventId"},
		{"GET", "/api/v2/conversations/bad-1/events?lastEventId=99999999999999999999", ``, "lastEventId"},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		r := f.Do(tc.method, tc.path, f.A.Key, body)
		require.Equal(t, 400, r.Status, "%s %.80s: %.300s", tc.method, tc.path, r.Body)
		require.Equal(t, tc.field, r.Err(t).Error.Field, "%s %.80s: %.300s", tc.method, tc.path, r.Body)
	}
	client := parleyv1connect.NewConversationServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(testenv.Bearer(f.A.Key)))
	ctx := context.Background()
	_, err := client.PostMessage(ctx, &parleyv1.PostMessageRequest{ConversationId: "bad-1", Text: long})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	_, err = client.PostMessage(ctx, &parleyv1.PostMessageRequest{ConversationId: "bad-1", Text: " "})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	_, err = client.PostMessage(ctx, &parleyv1.PostMessageRequest{ConversationId: "", Text: "hi"})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	_, err = client.ListConversations(ctx, &parleyv1.ListConversationsRequest{Cursor: "9999999999999999999_x"})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	neg := int64(-5)
	s, err := client.WatchConversation(ctx, &parleyv1.WatchConversationRequest{ConversationId: "bad-1", AfterEventId: &neg})
	require.NoError(t, err)
	require.False(t, s.Receive())
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(s.Err()), "%v", s.Err())
	require.Contains(t, s.Err().Error(), "after_event_id")
	require.NoError(t, s.Close())
}
