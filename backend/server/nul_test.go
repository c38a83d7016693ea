package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
)

// U+0000 anywhere a text enters is refused at the edge with the field named
// (it used to be a 500 from Postgres, or minutes of failing retries for a
// text datasource), over REST and Connect alike; so is a request nested
// past wire.MaxDepth, before protovalidate walks it.
func TestNULIsRefusedAtTheEdge(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testenv.WithWorkers)
	agent := e.Do("POST", "/api/agents", e.A.Key, map[string]any{"name": "Bot", "instructions": "Be brief."})
	require.Equal(t, http.StatusCreated, agent.Status, "%s", agent.Body)
	var a struct{ ID string }
	agent.JSON(t, &a)
	store := e.Do("POST", "/api/datastores", e.A.Key, map[string]any{"name": "Docs"})
	require.Equal(t, http.StatusCreated, store.Status, "%s", store.Body)
	var s struct{ ID string }
	store.JSON(t, &s)

	for _, tc := range []struct {
		path  string
		body  string
		field string
	}{
		{"/api/v2/agent/" + a.ID + "/chat", `{"query":"hi","conversationId":"n1","contact":{"firstName":"a\u0000b"}}`, "contact.firstName"},
		{"/api/v2/agent/" + a.ID + "/chat", `{"query":"hi","conversationId":"n2","contact":{"customFields":{"plan":"x\u0000"}}}`, "contact.customFields"},
		{"/api/v2/agent/" + a.ID + "/chat", `{"query":"hi","conversationId":"n3","attachments":[{"url":"https://example.com/a.png","name":"a\u0000.png"}]}`, "attachments[0].name"},
		{"/api/v2/agent/" + a.ID + "/chat", `{"query":"hi","conversationId":"n4","contact":{"customFields":{"k":` + deep(40) + `}}}`, "contact.customFields.k[0][0]"},
		{"/api/datastores", `{"name":"bad\u0000name"}`, "name"},
		{"/api/datastores/" + s.ID + "/datasources", `{"type":"text","name":"t","text":"before\u0000after"}`, "text"},
	} {
		r := e.Do("POST", tc.path, e.A.Key, tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.path, r.Body)
		require.Contains(t, r.Err(t).Error.Field, tc.field, "%s: %s", tc.path, r.Body)
	}
	// Nothing was stored.
	r := e.Do("GET", "/api/datastores/"+s.ID+"/datasources", e.A.Key, nil)
	require.JSONEq(t, `{"datasources":[],"nextCursor":null}`, string(r.Body))

	client := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	_, err := client.CreateAgent(context.Background(), &parleyv1.CreateAgentRequest{Name: "ok", Instructions: "in\x00structions"})
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, connect.CodeInvalidArgument, ce.Code())
	require.Contains(t, ce.Message(), "instructions")

	// 4,900 levels (9,800 messages: protobuf allows 10,000), and no query: the depth is
	// what is refused, before the schema's rules walk the message.
	v := structpb.NewStringValue("x")
	for range 4900 {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	chat := parleyv1connect.NewChatServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	_, err = chat.Chat(context.Background(), &parleyv1.ChatRequest{AgentId: a.ID, ConversationId: "n5",
		Contact: &parleyv1.Contact{CustomFields: &structpb.Struct{Fields: map[string]*structpb.Value{"k": v}}}})
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, connect.CodeInvalidArgument, ce.Code())
	require.Contains(t, ce.Message(), "nests too deeply")
}

// deep is a JSON array of n arrays, one in the other.
func deep(n int) string { return strings.Repeat("[", n) + `"x"` + strings.Repeat("]", n) }
