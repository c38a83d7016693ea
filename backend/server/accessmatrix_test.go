package server_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/parleyhq/parley/backend/access"
	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/apikey"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/compat"
)

// matrixKeys are the callers the access matrix tries: keys of organization
// A that must not get where they are sent.
type matrixKeys struct {
	// chat carries the chat scope only (a website's backend); rest is a
	// second such key for the REST paths, so that neither runs out of its
	// plan's minute.
	chat, rest string
	// revoked and expired carry both scopes, and work nowhere.
	revoked, expired string
}

func newMatrixKeys(t *testing.T, e *testenv.Env) matrixKeys {
	t.Helper()
	ctx := context.Background()
	var k matrixKeys
	var err error
	k.chat, err = account.CreateKey(ctx, e.App.Store, e.A.ID, "chat only", "", []string{"chat"})
	require.NoError(t, err)
	k.rest, err = account.CreateKey(ctx, e.App.Store, e.A.ID, "chat only, REST", "", []string{"chat"})
	require.NoError(t, err)

	keys := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	made, err := keys.CreateApiKey(ctx, &parleyv1.CreateApiKeyRequest{Name: "revoked", Scopes: []string{"admin", "chat"}})
	require.NoError(t, err)
	_, err = keys.RevokeApiKey(ctx, &parleyv1.RevokeApiKeyRequest{Id: made.GetApiKey().GetId()})
	require.NoError(t, err)
	k.revoked = made.GetSecret()

	// A key that expired an hour ago (the API issues none already expired).
	key, err := apikey.Generate()
	require.NoError(t, err)
	h := key.Hash()
	expired := time.Now().Add(-time.Hour)
	require.NoError(t, e.App.Store.Tenant(ctx, e.A.ID, func(q *dbq.Queries) error {
		_, err := q.CreateAPIKey(ctx, dbq.CreateAPIKeyParams{
			OrgID: e.A.ID, ID: uuid.New(), Name: "expired", KeyHash: h[:], DisplayPrefix: key.DisplayPrefix(),
			Plan: "pro", Scopes: []string{"admin", "chat"}, ExpiresAt: &expired, CreatedBy: "test",
		})
		return err
	}))
	k.expired = key.String()
	return k
}

// Every method of the schema, on every protocol, refuses the callers its
// rule leaves out: a key with the chat scope alone is PermissionDenied on
// every method that needs the admin scope; no key is Unauthenticated on
// every method not open to public agents or forms; a revoked or expired
// key is Unauthenticated on every method, those open to visitors too. A
// method added to the schema is walked as soon as it is served.
func TestAccessMatrixConnect(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	keys := newMatrixKeys(t, e)
	_ = parleyv1.File_parley_v1_access_proto

	type method struct {
		procedure string
		rule      access.Rule
		streaming bool
	}
	var methods []method
	protoregistry.GlobalFiles.RangeFilesByPackage("parley.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			svc := fd.Services().Get(i)
			for j := range svc.Methods().Len() {
				m := svc.Methods().Get(j)
				procedure := "/" + string(svc.FullName()) + "/" + string(m.Name())
				rule, err := access.For(procedure)
				require.NoError(t, err)
				methods = append(methods, method{procedure, rule, m.IsStreamingServer()})
			}
		}
		return true
	})
	require.GreaterOrEqual(t, len(methods), 48)

	protocols := []struct {
		name string
		opts []connect.ClientOption
	}{
		{"connect", nil},
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
	}
	// call sends an empty request (every request message reads one) and
	// returns the call's code.
	call := func(procedure string, streaming bool, key string, opts []connect.ClientOption) connect.Code {
		if key != "" {
			opts = append(opts, connect.WithInterceptors(testenv.Bearer(key)))
		}
		c := connect.NewClient[emptypb.Empty, emptypb.Empty](testenv.H2C(), e.URL+procedure, opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if !streaming {
			_, err := c.CallUnary(ctx, connect.NewRequest(&emptypb.Empty{}))
			return connect.CodeOf(err)
		}
		req := connect.NewRequest(&emptypb.Empty{})
		if key != "" {
			req.Header().Set("Authorization", "Bearer "+key)
		}
		stream, err := c.CallServerStream(ctx, req)
		if err != nil {
			return connect.CodeOf(err)
		}
		defer stream.Close()
		for stream.Receive() {
		}
		return connect.CodeOf(stream.Err())
	}

	for _, m := range methods {
		for _, p := range protocols {
			name := p.name + " " + m.procedure
			got := call(m.procedure, m.streaming, keys.chat, p.opts)
			if m.rule.Scope == auth.ScopeAdmin {
				require.Equal(t, connect.CodePermissionDenied, got, "%s: a chat key got through", name)
			} else {
				require.NotContains(t, []connect.Code{connect.CodePermissionDenied, connect.CodeUnauthenticated}, got,
					"%s: a chat key was refused", name)
			}
			if !m.rule.PublicAgents && !m.rule.PublicForms {
				require.Equal(t, connect.CodeUnauthenticated, call(m.procedure, m.streaming, "", p.opts), "%s: no key got through", name)
			}
			refused := []connect.Code{connect.CodeUnauthenticated}
			if m.rule.PublicAgents {
				// The service reads the key of these, after the schema's
				// rules refused the empty request (a valid one below).
				refused = append(refused, connect.CodeInvalidArgument)
			}
			require.Contains(t, refused, call(m.procedure, m.streaming, keys.revoked, p.opts), "%s: a revoked key got through", name)
			require.Contains(t, refused, call(m.procedure, m.streaming, keys.expired, p.opts), "%s: an expired key got through", name)
		}
	}
	// Methods open to public agents' visitors, sent requests the schema
	// lets through: a revoked or expired key is refused by the service.
	ctx := context.Background()
	for _, key := range []string{keys.revoked, keys.expired} {
		opts := connect.WithInterceptors(testenv.Bearer(key))
		chats := parleyv1connect.NewChatServiceClient(http.DefaultClient, e.URL, opts)
		_, err := chats.Chat(ctx, &parleyv1.ChatRequest{AgentId: uuid.NewString(), ConversationId: "c-1", Query: "hello"})
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "Chat: %v", err)
		convs := parleyv1connect.NewConversationServiceClient(http.DefaultClient, e.URL, opts)
		_, err = convs.ListConversations(ctx, &parleyv1.ListConversationsRequest{})
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "ListConversations: %v", err)
		_, err = convs.GetConversation(ctx, &parleyv1.GetConversationRequest{ConversationId: "c-1"})
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "GetConversation: %v", err)
		rating := int32(5)
		_, err = convs.UpdateConversation(ctx, &parleyv1.UpdateConversationRequest{ConversationId: "c-1", Rating: &rating})
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "UpdateConversation: %v", err)
	}
}

// restOpen lists the REST routes open beyond the admin scope: to a key with
// the chat scope (chat), and to callers without a key, public agents'
// visitors and public forms' (keyless). Every other route needs the admin
// scope: a route added to compat is walked as an admin route until it is
// listed here.
var restOpen = map[string]struct{ chat, keyless bool }{
	"POST /v2/agent/{agentId}/chat":         {true, true},
	"GET /v2/agent/{agentId}/conversations": {true, true},
	"GET /v2/conversations":                 {true, true},
	"GET /v2/conversations/{id}":            {true, true},
	"PUT /v2/conversations/{id}":            {true, true},
	"GET /v2/conversations/{id}/events":     {true, true},
	"POST /agents/{agentId}/query":          {true, true},
	"POST /forms/{formId}":                  {true, true},
	"GET /forms/{formId}":                   {false, true},
	"GET /api/openapi.json":                 {true, true},
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// Every REST route refuses the callers its method's rule leaves out, as
// TestAccessMatrixConnect checks for the RPCs: a key with the chat scope
// alone is 403 on every admin route, no key 401 on every route not open to
// visitors, a revoked or expired key 401 everywhere.
func TestAccessMatrixREST(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	keys := newMatrixKeys(t, e)

	routes := compat.New(nil, nil, nil).Routes()
	require.GreaterOrEqual(t, len(routes), 80)
	for _, r := range routes {
		path := pathParam.ReplaceAllStringFunc(r.Path, func(string) string { return uuid.NewString() })
		bare := strings.TrimPrefix(r.Path, "/api")
		if r.Path == "/api/openapi.json" {
			bare = r.Path
		}
		pattern := r.Method + " " + bare
		open := restOpen[pattern]
		var body any
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
			body = `{}`
		}
		switch pattern {
		case "POST /v2/agent/{agentId}/chat", "POST /agents/{agentId}/query":
			body = `{"query":"hello","conversationId":"c-1"}`
		case "PUT /v2/conversations/{id}":
			body = `{"rating":5}`
		}
		name := r.Method + " " + r.Path

		res := e.Do(r.Method, path, keys.rest, body)
		if open.chat {
			require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, res.Status, "%s: a chat key was refused: %s", name, res.Body)
		} else {
			require.Equal(t, http.StatusForbidden, res.Status, "%s: a chat key got through: %s", name, res.Body)
			require.Equal(t, "FORBIDDEN", res.Err(t).Error.Code, name)
		}
		if !open.keyless {
			res = e.Do(r.Method, path, "", body)
			require.Equal(t, http.StatusUnauthorized, res.Status, "%s: no key got through: %s", name, res.Body)
		}
		if pattern == "GET /api/openapi.json" {
			continue
		}
		for _, k := range []struct{ name, key string }{{"revoked", keys.revoked}, {"expired", keys.expired}} {
			res = e.Do(r.Method, path, k.key, body)
			require.Equal(t, http.StatusUnauthorized, res.Status, "%s: a %s key got through: %s", name, k.name, res.Body)
			require.Equal(t, "UNAUTHORIZED", res.Err(t).Error.Code, fmt.Sprint(name, " ", k.name))
		}
	}
}

// A private agent is reached with a key of its organization only: without
// one every entry point a public agent's visitor uses is Unauthenticated
// (401), and with another organization's key Forbidden (403).
func TestPrivateAgentOnEveryEntryPoint(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	agents := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, connect.WithInterceptors(testenv.Bearer(e.A.Key)))
	made, err := agents.CreateAgent(ctx, &parleyv1.CreateAgentRequest{Name: "Internal", Instructions: "Answer staff."})
	require.NoError(t, err)
	id := made.GetAgent().GetId()
	require.Equal(t, "private", made.GetAgent().GetVisibility())

	for _, c := range []struct {
		key  string
		code connect.Code
	}{{"", connect.CodeUnauthenticated}, {e.B.Key, connect.CodePermissionDenied}} {
		var opts []connect.ClientOption
		if c.key != "" {
			opts = append(opts, connect.WithInterceptors(testenv.Bearer(c.key)))
		}
		chats := parleyv1connect.NewChatServiceClient(http.DefaultClient, e.URL, opts...)
		chat := &parleyv1.ChatRequest{AgentId: id, ConversationId: "c-1", VisitorId: "v-1", Query: "hello"}
		_, err := chats.Chat(ctx, chat)
		require.Equal(t, c.code, connect.CodeOf(err), "Chat: %v", err)
		req := connect.NewRequest(chat)
		if c.key != "" {
			req.Header().Set("Authorization", "Bearer "+c.key) // testenv.Bearer sets it on unary calls only
		}
		stream, err := connect.NewClient[parleyv1.ChatRequest, parleyv1.ChatStreamResponse](http.DefaultClient,
			e.URL+parleyv1connect.ChatServiceChatStreamProcedure).CallServerStream(ctx, req)
		require.NoError(t, err)
		for stream.Receive() {
		}
		require.Equal(t, c.code, connect.CodeOf(stream.Err()), "ChatStream: %v", stream.Err())
		require.NoError(t, stream.Close())

		if c.key != "" {
			continue // a key reads its own organization's conversations, whatever agent_id names
		}
		convs := parleyv1connect.NewConversationServiceClient(http.DefaultClient, e.URL, opts...)
		_, err = convs.ListConversations(ctx, &parleyv1.ListConversationsRequest{AgentId: id, VisitorId: "v-1"})
		require.Equal(t, c.code, connect.CodeOf(err), "ListConversations: %v", err)
		_, err = convs.GetConversation(ctx, &parleyv1.GetConversationRequest{ConversationId: "c-1", AgentId: id, VisitorId: "v-1"})
		require.Equal(t, c.code, connect.CodeOf(err), "GetConversation: %v", err)
		rating := int32(5)
		_, err = convs.UpdateConversation(ctx, &parleyv1.UpdateConversationRequest{ConversationId: "c-1", AgentId: id, VisitorId: "v-1", Rating: &rating})
		require.Equal(t, c.code, connect.CodeOf(err), "UpdateConversation: %v", err)
		watch, err := convs.WatchConversation(ctx, &parleyv1.WatchConversationRequest{ConversationId: "c-1", AgentId: id, VisitorId: "v-1"})
		require.NoError(t, err)
		for watch.Receive() {
		}
		require.Equal(t, c.code, connect.CodeOf(watch.Err()), "WatchConversation: %v", watch.Err())
		require.NoError(t, watch.Close())
	}

	chatBody := `{"query":"hello","conversationId":"c-1","visitorId":"v-1"}`
	for _, prefix := range []string{"/api", ""} {
		for _, c := range []struct {
			key    string
			status int
		}{{"", http.StatusUnauthorized}, {e.B.Key, http.StatusForbidden}} {
			for _, r := range []struct{ method, path, body string }{
				{"POST", "/v2/agent/" + id + "/chat", chatBody},
				{"POST", "/v2/agent/" + id + "/chat", `{"query":"hello","conversationId":"c-1","visitorId":"v-1","streaming":true}`},
				{"POST", "/agents/" + id + "/query", chatBody},
			} {
				res := e.Do(r.method, prefix+r.path, c.key, r.body)
				require.Equal(t, c.status, res.Status, "%s %s: %s", r.method, prefix+r.path, res.Body)
			}
			if c.key != "" {
				continue
			}
			for _, r := range []struct{ method, path, body string }{
				{"GET", "/v2/agent/" + id + "/conversations?visitorId=v-1", ""},
				{"GET", "/v2/conversations?visitorId=v-1&agentId=" + id, ""},
				{"GET", "/v2/conversations/c-1?visitorId=v-1&agentId=" + id, ""},
				{"PUT", "/v2/conversations/c-1?visitorId=v-1&agentId=" + id, `{"rating":5}`},
				{"GET", "/v2/conversations/c-1/events?visitorId=v-1&agentId=" + id, ""},
			} {
				var body any
				if r.body != "" {
					body = r.body
				}
				res := e.Do(r.method, prefix+r.path, c.key, body)
				require.Equal(t, c.status, res.Status, "%s %s: %s", r.method, prefix+r.path, res.Body)
			}
		}
	}
}
