package conversation_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
)

// A person's reply or a deletion over the API may name the createdAt of
// the conversation the caller read: one deleted and started again under
// its id by another visitor since is refused (REST 409, Connect aborted),
// and nothing is sent or deleted. Without it, a reply typed for Ann
// reached Bob (ids are the clients' own).
func TestReplyAndDeleteNameTheConversationRead(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	read := func() detail {
		t.Helper()
		r := f.Do("GET", "/api/v2/conversations/reused", f.A.Key, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var d detail
		r.JSON(t, &d)
		return d
	}
	f.chat(t, f.public, "", "reused", "ann", "Hello, I am Ann.")
	ann := read()
	stamp := ann.CreatedAt.Format(time.RFC3339Nano)
	r := f.Do("DELETE", "/api/v2/conversations/reused", f.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	f.chat(t, f.public, "", "reused", "bob", "Hello, I am Bob.")
	bob := read()
	require.Equal(t, "bob", bob.VisitorID)

	r = f.Do("POST", "/api/v2/conversations/reused/messages", f.A.Key,
		map[string]any{"text": "Ann, your refund is on its way.", "conversationCreatedAt": stamp})
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	require.Contains(t, r.Err(t).Error.Message, "deleted and started again")
	r = f.Do("POST", "/api/v2/conversations/reused/messages", f.A.Key,
		map[string]any{"text": "Ann, your refund is on its way.", "conversationCreatedAt": "yesterday"})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "conversationCreatedAt", r.Err(t).Error.Field)
	convs := parleyv1connect.NewConversationServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(bearer(f.A.Key)))
	_, err := convs.PostMessage(ctx, &parleyv1.PostMessageRequest{ConversationId: "reused", Text: "Ann, your refund is on its way.",
		ConversationCreateTime: timestamppb.New(ann.CreatedAt)})
	require.Equal(t, connect.CodeAborted, connect.CodeOf(err), "%v", err)

	r = f.Do("DELETE", "/api/v2/conversations/reused?createdAt="+stamp, f.A.Key, nil)
	require.Equal(t, http.StatusConflict, r.Status, "%s", r.Body)
	_, err = convs.DeleteConversation(ctx, &parleyv1.DeleteConversationRequest{ConversationId: "reused", ConversationCreateTime: timestamppb.New(ann.CreatedAt)})
	require.Equal(t, connect.CodeAborted, connect.CodeOf(err), "%v", err)

	// A time no Timestamp holds (year 0000 in RFC 3339; seconds past the
	// years 1 to 9999, or nanos out of range, in a binary Timestamp) names
	// no conversation: 400 naming the field over REST, invalid_argument
	// over Connect, as Connect's JSON refuses it; not 409, "deleted and
	// started again", which sent the client to read it again for nothing.
	r = f.Do("POST", "/api/v2/conversations/reused/messages", f.A.Key,
		map[string]any{"text": "Ann, your refund is on its way.", "conversationCreatedAt": "0000-06-01T00:00:00Z"})
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "conversationCreatedAt", r.Err(t).Error.Field)
	r = f.Do("DELETE", "/api/v2/conversations/reused?createdAt=0000-06-01T00:00:00Z", f.A.Key, nil)
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	require.Equal(t, "createdAt", r.Err(t).Error.Field)
	for _, bad := range []*timestamppb.Timestamp{{Seconds: -70_000_000_000}, {Seconds: timestamppb.New(bob.CreatedAt).GetSeconds(), Nanos: -1}} {
		_, err = convs.PostMessage(ctx, &parleyv1.PostMessageRequest{ConversationId: "reused", Text: "Ann, your refund is on its way.",
			ConversationCreateTime: bad})
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
		require.Contains(t, err.Error(), "conversation_create_time")
		_, err = convs.DeleteConversation(ctx, &parleyv1.DeleteConversationRequest{ConversationId: "reused", ConversationCreateTime: bad})
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	}

	// Bob's conversation is as he left it: no reply, not taken over, there.
	after := read()
	require.Equal(t, bob.Messages, after.Messages)
	require.Equal(t, bob.Status, after.Status)

	// Naming Bob's conversation acts on it.
	r = f.Do("POST", "/api/v2/conversations/reused/messages", f.A.Key,
		map[string]any{"text": "Hi Bob.", "conversationCreatedAt": bob.CreatedAt.Format(time.RFC3339Nano)})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	// Digits past the microsecond Postgres keeps name it too, as they do
	// for a deletion (its statement compares to the microsecond): a reply
	// was refused as to a conversation started again, where a deletion
	// with the same time went through.
	nanos := bob.CreatedAt.Truncate(time.Microsecond).Add(789 * time.Nanosecond)
	r = f.Do("POST", "/api/v2/conversations/reused/messages", f.A.Key,
		map[string]any{"text": "Hi again, Bob.", "conversationCreatedAt": nanos.Format(time.RFC3339Nano)})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	_, err = convs.DeleteConversation(ctx, &parleyv1.DeleteConversationRequest{ConversationId: "reused", ConversationCreateTime: timestamppb.New(bob.CreatedAt)})
	require.NoError(t, err)
}
