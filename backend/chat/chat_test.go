package chat_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

type fixture struct {
	*testenv.Env
	fake    *testenv.FakeProvider
	private string // an agent of A, private
	public  string // an agent of A, public
}

func setup(t *testing.T) *fixture {
	t.Helper()
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithFakeModels(fake))
	f := &fixture{Env: e, fake: fake}
	f.private = f.agent(t, `{"name":"Private","instructions":"You are private.","temperature":0.25}`)
	f.public = f.agent(t, `{"name":"Public","instructions":"You are public.","visibility":"public","model":"gpt-4o"}`)
	return f
}

func (f *fixture) agent(t *testing.T, body string) string {
	t.Helper()
	r := f.Do("POST", "/api/agents", f.A.Key, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var a struct{ ID string }
	r.JSON(t, &a)
	return a.ID
}

// datastore makes a datastore holding text as one datasource, waits until
// it is synced, and returns the datastore's id and the datasource's.
func (f *fixture) datastore(t *testing.T, text string) (store, source string) {
	t.Helper()
	r := f.Do("POST", "/api/datastores", f.A.Key, map[string]any{"name": "docs"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct{ ID string }
	r.JSON(t, &ds)
	return ds.ID, f.source(t, ds.ID, "docs", text)
}

// source adds text to store as a datasource named name, waits until it is
// synced, and returns its id.
func (f *fixture) source(t *testing.T, store, name, text string) string {
	t.Helper()
	ctx := context.Background()
	r := f.Do("POST", "/api/datastores/"+store+"/datasources", f.A.Key, map[string]any{"type": "text", "name": name, "text": text})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ds struct{ ID string }
	r.JSON(t, &ds)
	require.Eventually(t, func() bool {
		var row dbq.GetDatasourceRow
		require.NoError(t, f.App.Store.Tenant(ctx, f.A.ID, func(q *dbq.Queries) (err error) {
			row, err = q.GetDatasource(ctx, dbq.GetDatasourceParams{OrgID: f.A.ID, ID: uuid.MustParse(ds.ID)})
			return err
		}))
		require.NotEqual(t, "error", row.Status)
		return row.Status == "synced"
	}, 60*time.Second, 100*time.Millisecond)
	return ds.ID
}

func bearer(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }

type reply struct {
	Answer, Response, ConversationID, MessageID, VisitorID string
	Sources                                                []map[string]any
	Usage                                                  struct {
		PromptTokens, CompletionTokens, TotalTokens, Tokens int64
		Cost                                                float64
	}
	Metadata struct {
		Model, Provider string
		Latency         *int64
	}
}

func (f *fixture) chat(t *testing.T, agent, key, body string) (int, reply, testenv.Response) {
	t.Helper()
	r := f.Do("POST", "/api/v2/agent/"+agent+"/chat", key, body)
	var rep reply
	if r.Status == 200 {
		r.JSON(t, &rep)
	}
	return r.Status, rep, r
}

// promptOf is the messages the fake provider received in call i (0-based).
func promptOf(t *testing.T, fake *testenv.FakeProvider, i int) []map[string]any {
	t.Helper()
	reqs := fake.Requests()
	require.Greater(t, len(reqs), i)
	var out []map[string]any
	for _, m := range reqs[i]["messages"].([]any) {
		out = append(out, m.(map[string]any))
	}
	return out
}

func TestChatJSON(t *testing.T) {
	t.Parallel()
	f := setup(t)
	status, rep, raw := f.chat(t, f.private, f.A.Key, `{"query":"Hi there","conversationId":"conv-1","channel":"website"}`)
	require.Equal(t, 200, status, "%s", raw.Body)
	require.Equal(t, "Hello from the fake model.", rep.Answer)
	require.Equal(t, rep.Answer, rep.Response)
	require.Equal(t, "conv-1", rep.ConversationID)
	require.NotEmpty(t, rep.MessageID)
	require.Equal(t, []map[string]any{}, rep.Sources)
	require.EqualValues(t, 11, rep.Usage.PromptTokens)
	require.EqualValues(t, 5, rep.Usage.CompletionTokens)
	require.EqualValues(t, 16, rep.Usage.TotalTokens)
	require.EqualValues(t, 16, rep.Usage.Tokens)
	require.InDelta(t, (11*1+5*2)/1e6, rep.Usage.Cost, 1e-12)
	require.Equal(t, "gpt-4o-mini", rep.Metadata.Model)
	require.Equal(t, "openai", rep.Metadata.Provider)
	require.NotNil(t, rep.Metadata.Latency)
	require.NotEmpty(t, raw.Header.Get("X-RateLimit-Limit"))

	body := f.fake.Requests()[0]
	require.Equal(t, "fake-gpt-4o-mini", body["model"])
	require.Equal(t, 0.25, body["temperature"], "the agent's temperature")
	msgs := promptOf(t, f.fake, 0)
	require.Equal(t, "system", msgs[0]["role"])
	require.Equal(t, "You are private.", msgs[0]["content"])
	require.Equal(t, "Hi there", msgs[len(msgs)-1]["content"])

	// selectedModel overrides the model for one turn; message is query's alias.
	status, rep, raw = f.chat(t, f.private, f.A.Key, `{"message":"Again","conversationId":"conv-1","selectedModel":"gemini-1-5-pro","temperature":0.9,"modelName":"x","systemPrompt":"ignored","maxTokens":5}`)
	require.Equal(t, 200, status, "%s", raw.Body)
	require.Equal(t, "gemini-1-5-pro", rep.Metadata.Model)
	require.Equal(t, "fake-gemini-1-5-pro", f.fake.Requests()[1]["model"])
	require.Equal(t, 0.25, f.fake.Requests()[1]["temperature"], "a legacy temperature field is ignored")
}

func TestContinuationAndIsolation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	turn := func(agent, key, body string) reply {
		status, rep, raw := f.chat(t, agent, key, body)
		require.Equal(t, 200, status, "%s", raw.Body)
		return rep
	}
	turn(f.public, "", `{"query":"My name is Ada","conversationId":"shared-id","visitorId":"ada"}`)
	rep := turn(f.public, "", `{"query":"What is my name?","conversationId":"shared-id","visitorId":"ada"}`)
	require.Equal(t, "shared-id", rep.ConversationID)
	second := promptOf(t, f.fake, 1)
	var contents []string
	for _, m := range second {
		contents = append(contents, fmt.Sprint(m["role"], ": ", m["content"]))
	}
	require.Equal(t, []string{
		"system: You are public.", "user: My name is Ada", "assistant: Hello from the fake model.", "user: What is my name?",
	}, contents, "the second turn's prompt holds the first")

	// Another visitor naming Ada's conversation gets a new one, with nothing of Ada's.
	rep = turn(f.public, "", `{"query":"Who was here?","conversationId":"shared-id","visitorId":"eve"}`)
	require.NotEqual(t, "shared-id", rep.ConversationID)
	for _, m := range promptOf(t, f.fake, 2) {
		require.NotContains(t, fmt.Sprint(m["content"]), "Ada")
	}
	// Another agent of the same organization naming it: also a new one.
	rep = turn(f.private, f.A.Key, `{"query":"Hello?","conversationId":"shared-id"}`)
	require.NotEqual(t, "shared-id", rep.ConversationID)
	require.Len(t, promptOf(t, f.fake, 3), 2, "system + this message only")
	// Ada continues hers undisturbed.
	rep = turn(f.public, "", `{"query":"Still me","conversationId":"shared-id","visitorId":"ada"}`)
	require.Equal(t, "shared-id", rep.ConversationID)
	require.Len(t, promptOf(t, f.fake, 4), 6)

	// Another organization may use the same id: its own namespace, its own conversation.
	other := f.agentOf(t, f.B.Key)
	rep = turn(other, f.B.Key, `{"query":"Hi","conversationId":"shared-id"}`)
	require.Equal(t, "shared-id", rep.ConversationID)
	require.Len(t, promptOf(t, f.fake, 5), 2)
}

func (f *fixture) agentOf(t *testing.T, key string) string {
	r := f.Do("POST", "/api/agents", key, `{"name":"B","instructions":"B's"}`)
	require.Equal(t, http.StatusCreated, r.Status)
	var a struct{ ID string }
	r.JSON(t, &a)
	return a.ID
}

func TestSSESpecDialect(t *testing.T) {
	t.Parallel()
	f := setup(t)
	resp := f.Post("/api/v2/agent/"+f.private+"/chat", bearer(f.A.Key), `{"query":"Hi","conversationId":"s1","streaming":true}`)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
	require.Equal(t, "no", resp.Header.Get("X-Accel-Buffering"))
	events := testenv.ReadSSE(t, resp.Body)
	require.Equal(t, "[DONE]", events[len(events)-1].Data)
	var text strings.Builder
	var done map[string]any
	for _, ev := range events[:len(events)-1] {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &m), ev.Data)
		switch m["type"] {
		case "token":
			require.Nil(t, done, "a token after done")
			text.WriteString(m["value"].(string))
		case "done":
			done = m
		default:
			t.Fatalf("unexpected event %v", m)
		}
	}
	require.Equal(t, "Hello from the fake model.", text.String())
	require.NotNil(t, done)
	require.Equal(t, "s1", done["conversationId"])
	require.NotEmpty(t, done["messageId"])
	require.EqualValues(t, 16, done["usage"].(map[string]any)["totalTokens"])
	require.Equal(t, "openai", done["metadata"].(map[string]any)["provider"])

	// Accept alone asks for the stream when the body says nothing.
	resp2 := f.Post("/api/v2/agent/"+f.private+"/chat", map[string]string{"Authorization": "Bearer " + f.A.Key, "Accept": "text/event-stream"}, `{"query":"Hi","conversationId":"s1"}`)
	defer resp2.Body.Close()
	require.Equal(t, "text/event-stream", resp2.Header.Get("Content-Type"))
	// ...and streaming:false wins over Accept.
	resp3 := f.Post("/api/v2/agent/"+f.private+"/chat", map[string]string{"Authorization": "Bearer " + f.A.Key, "Accept": "text/event-stream"}, `{"query":"Hi","conversationId":"s1","streaming":false}`)
	defer resp3.Body.Close()
	require.Contains(t, resp3.Header.Get("Content-Type"), "application/json")
}

func TestSSETextDialect(t *testing.T) {
	t.Parallel()
	f := setup(t)
	resp := f.Post("/api/v2/agent/"+f.private+"/chat?streamFormat=text", bearer(f.A.Key), `{"query":"Hi","conversationId":"t1","streaming":true}`)
	defer resp.Body.Close()
	events := testenv.ReadSSE(t, resp.Body)
	require.Equal(t, "[DONE]", events[len(events)-1].Data)
	var text strings.Builder
	for _, ev := range events[:len(events)-1] {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &m))
		if m["type"] == "text" {
			text.WriteString(m["text"].(string))
		}
		require.NotEqual(t, "token", m["type"])
	}
	require.Equal(t, "Hello from the fake model.", text.String())
}

func TestLegacyV1(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.Do("POST", "/api/agents/"+f.public+"/query", "", `{"query":"Hi"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	require.Equal(t, "true", r.Header.Get("Deprecation"))
	require.Equal(t, `</api/v2/agent/`+f.public+`/chat>; rel="successor-version"`, r.Header.Get("Link"))
	var v1 struct {
		Answer, ConversationID, VisitorID, MessageID string
		Sources                                      []any
	}
	r.JSON(t, &v1)
	require.Equal(t, "Hello from the fake model.", v1.Answer)
	require.NotEmpty(t, v1.ConversationID)
	require.NotEmpty(t, v1.VisitorID, "v1 makes a visitor id when none is sent")
	require.NotEmpty(t, v1.MessageID)
	require.NotNil(t, v1.Sources)

	f.fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"50% off", " & more\n", "ünïcode"}}
	}
	resp := f.Post("/agents/"+f.private+"/query", bearer(f.A.Key), `{"query":"Deals?","conversationId":"v1c","streaming":true}`)
	defer resp.Body.Close()
	require.Equal(t, "true", resp.Header.Get("Deprecation"))
	events := testenv.ReadSSE(t, resp.Body)
	var text strings.Builder
	var final map[string]any
	for _, ev := range events {
		switch ev.Type {
		case "answer":
			chunk, err := url.PathUnescape(ev.Data)
			require.NoError(t, err)
			text.WriteString(chunk)
		case "endpoint_response":
			require.NoError(t, json.Unmarshal([]byte(ev.Data), &final))
		}
	}
	require.Equal(t, "[DONE]", events[len(events)-1].Data)
	require.Equal(t, "50% off & more\nünïcode", text.String())
	require.Equal(t, text.String(), final["answer"])
	require.Equal(t, "v1c", final["conversationId"])
}

func TestChatOverConnectAndGRPC(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	c := parleyv1connect.NewChatServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(testenv.Bearer(f.A.Key)))
	resp, err := c.Chat(ctx, &parleyv1.ChatRequest{AgentId: f.private, Query: "Hi", ConversationId: "rpc-1"})
	require.NoError(t, err)
	require.Equal(t, "Hello from the fake model.", resp.GetAnswer())
	require.Equal(t, "openai", resp.GetMetadata().GetProvider())

	collect := func(next func() bool, msg func() *parleyv1.ChatStreamResponse) (string, *parleyv1.ChatResponse) {
		var text strings.Builder
		var done *parleyv1.ChatResponse
		for next() {
			switch e := msg().GetEvent().(type) {
			case *parleyv1.ChatStreamResponse_Token:
				text.WriteString(e.Token)
			case *parleyv1.ChatStreamResponse_Done:
				done = e.Done
			}
		}
		return text.String(), done
	}
	for _, opt := range []struct {
		name   string
		client *http.Client
		opts   []connect.ClientOption
	}{
		{"connect", http.DefaultClient, nil},
		{"grpc-web", http.DefaultClient, []connect.ClientOption{connect.WithGRPCWeb()}},
		{"grpc via connect-go", testenv.H2C(), []connect.ClientOption{connect.WithGRPC()}},
	} {
		t.Run(opt.name+" stream", func(t *testing.T) {
			c := parleyv1connect.NewChatServiceClient(opt.client, f.URL, append(opt.opts, connect.WithInterceptors(testenv.Bearer(f.A.Key)))...)
			stream, err := c.ChatStream(ctx, &parleyv1.ChatRequest{AgentId: f.public, Query: "Hi", ConversationId: "rpc-s", VisitorId: "v"})
			require.NoError(t, err)
			text, done := collect(stream.Receive, stream.Msg)
			require.NoError(t, stream.Err())
			require.Equal(t, "Hello from the fake model.", text)
			require.NotNil(t, done)
			require.Equal(t, "gpt-4o", done.GetMetadata().GetModel())
		})
	}
	t.Run("grpc-go stream", func(t *testing.T) {
		s := grpcChatStream(t, f, &parleyv1.ChatRequest{AgentId: f.private, Query: "Hi", ConversationId: "grpc-go"})
		var text strings.Builder
		var done bool
		for {
			m := new(parleyv1.ChatStreamResponse)
			if err := s.RecvMsg(m); err == io.EOF {
				break
			} else {
				require.NoError(t, err)
			}
			text.WriteString(m.GetToken())
			done = done || m.GetDone() != nil
		}
		require.Equal(t, "Hello from the fake model.", text.String())
		require.True(t, done)
	})
}

// grpcChatStream opens a ChatStream with grpc-go as f.A's key and sends req.
func grpcChatStream(t *testing.T, f *fixture, req *parleyv1.ChatRequest) grpc.ClientStream {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+f.A.Key)
	s, err := testenv.GRPC(t, f.URL).NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/parley.v1.ChatService/ChatStream")
	require.NoError(t, err)
	require.NoError(t, s.SendMsg(req))
	require.NoError(t, s.CloseSend())
	return s
}

func TestChatRules(t *testing.T) {
	t.Parallel()
	f := setup(t)
	chatOnlyB := f.B.Key
	cases := []struct {
		name, agent, key, body string
		status                 int
		code, field            string
	}{
		{"query missing", f.private, f.A.Key, `{"conversationId":"c"}`, 400, "BAD_REQUEST", "query"},
		{"conversationId missing", f.private, f.A.Key, `{"query":"q"}`, 400, "BAD_REQUEST", "conversationId"},
		{"conversationId a path segment", f.private, f.A.Key, `{"query":"q","conversationId":".."}`, 400, "BAD_REQUEST", "conversationId"},
		{"conversationId a dot", f.public, "", `{"query":"q","conversationId":".","visitorId":"v1"}`, 400, "BAD_REQUEST", "conversationId"},
		{"a visitor choosing the model", f.public, "", `{"query":"q","conversationId":"c","visitorId":"v1","selectedModel":"claude-3-5-sonnet"}`, 403, "FORBIDDEN", "selectedModel"},
		{"query wrong type", f.private, f.A.Key, `{"query":5,"conversationId":"c"}`, 400, "BAD_REQUEST", "query"},
		{"streaming wrong type", f.private, f.A.Key, `{"query":"q","conversationId":"c","streaming":"yes"}`, 400, "BAD_REQUEST", "streaming"},
		{"channel", f.private, f.A.Key, `{"query":"q","conversationId":"c","channel":"fax"}`, 400, "BAD_REQUEST", "channel"},
		{"email", f.private, f.A.Key, `{"query":"q","conversationId":"c","contact":{"email":"not-an-email"}}`, 400, "BAD_REQUEST", "contact.email"},
		{"phone", f.private, f.A.Key, `{"query":"q","conversationId":"c","contact":{"phoneNumber":"0612345678"}}`, 400, "BAD_REQUEST", "contact.phoneNumber"},
		{"phone with letters", f.private, f.A.Key, `{"query":"q","conversationId":"c","contact":{"phoneNumber":"+33 6 CALL ME"}}`, 400, "BAD_REQUEST", "contact.phoneNumber"},
		{"phone of 16 digits", f.private, f.A.Key, `{"query":"q","conversationId":"c","contact":{"phoneNumber":"+33 6 12 34 56 78 90 12 3"}}`, 400, "BAD_REQUEST", "contact.phoneNumber"},
		{"attachment url", f.private, f.A.Key, `{"query":"q","conversationId":"c","attachments":[{"url":"file:///etc/passwd"}]}`, 400, "BAD_REQUEST", "attachments[0].url"},
		{"attachment without url", f.private, f.A.Key, `{"query":"q","conversationId":"c","attachments":[{"name":"x"}]}`, 400, "BAD_REQUEST", "attachments[0].url"},
		{"selectedModel", f.private, f.A.Key, `{"query":"q","conversationId":"c","selectedModel":"gpt-5"}`, 400, "BAD_REQUEST", "selectedModel"},
		{"visitorId on public", f.public, "", `{"query":"q","conversationId":"c"}`, 400, "BAD_REQUEST", "visitorId"},
		{"unknown agent", "01a200f2-0000-7000-8000-000000000000", f.A.Key, `{"query":"q","conversationId":"c"}`, 404, "NOT_FOUND", ""},
		{"unknown agent, no key", "nope", "", `{"query":"q","conversationId":"c","visitorId":"v"}`, 404, "NOT_FOUND", ""},
		{"private without key", f.private, "", `{"query":"q","conversationId":"c","visitorId":"v"}`, 401, "UNAUTHORIZED", ""},
		{"private with bad key", f.private, "prly_nope", `{"query":"q","conversationId":"c"}`, 401, "UNAUTHORIZED", ""},
		{"another organization's key", f.private, chatOnlyB, `{"query":"q","conversationId":"c"}`, 403, "FORBIDDEN", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := f.Do("POST", "/api/v2/agent/"+tc.agent+"/chat", tc.key, tc.body)
			require.Equal(t, tc.status, r.Status, "%s", r.Body)
			eb := r.Err(t)
			require.Equal(t, tc.code, eb.Error.Code)
			require.Equal(t, tc.field, eb.Error.Field)
		})
	}
	require.Empty(t, f.fake.Requests(), "no refused request reached the model")

	// Messages that say what to send, not which rules failed.
	for body, want := range map[string]string{
		`{"query":"q"}`: "conversationId: value is required",
		`{"query":"q","conversationId":"c","contact":{"phoneNumber":"0612345678"}}`: "contact.phoneNumber: must be in international (E.164) format: " +
			"a plus, the country code and the number, e.g. +33612345678",
	} {
		r := f.Do("POST", "/api/v2/agent/"+f.private+"/chat", f.A.Key, body)
		require.Equal(t, want, r.Err(t).Error.Message, body)
	}

	t.Run("a key without the chat scope", func(t *testing.T) {
		keys := parleyv1connect.NewApiKeyServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(testenv.Bearer(f.A.Key)))
		k, err := keys.CreateApiKey(context.Background(), &parleyv1.CreateApiKeyRequest{Name: "admin only", Scopes: []string{"admin"}})
		require.NoError(t, err)
		r := f.Do("POST", "/api/v2/agent/"+f.private+"/chat", k.GetSecret(), `{"query":"q","conversationId":"c"}`)
		require.Equal(t, 403, r.Status)
	})

	t.Run("over Connect", func(t *testing.T) {
		ctx := context.Background()
		anon := parleyv1connect.NewChatServiceClient(http.DefaultClient, f.URL)
		_, err := anon.Chat(ctx, &parleyv1.ChatRequest{AgentId: f.private, Query: "q", ConversationId: "c", VisitorId: "v"})
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err))
		_, err = anon.Chat(ctx, &parleyv1.ChatRequest{AgentId: f.private, ConversationId: "c"})
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
		_, err = anon.Chat(ctx, &parleyv1.ChatRequest{AgentId: "01a200f2-0000-7000-8000-000000000000", Query: "q", ConversationId: "c", VisitorId: "v"})
		require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
		b := parleyv1connect.NewChatServiceClient(http.DefaultClient, f.URL, connect.WithInterceptors(testenv.Bearer(f.B.Key)))
		_, err = b.Chat(ctx, &parleyv1.ChatRequest{AgentId: f.private, Query: "q", ConversationId: "c"})
		require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
	})
}

func TestPublicAgentLimitsPerVisitorAndIP(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithFakeModels(fake))
	free := e.Bootstrap("Free", "free")
	r := e.Do("POST", "/api/agents", free.Key, `{"name":"Pub","instructions":"i","visibility":"public"}`)
	var a struct{ ID string }
	r.JSON(t, &a)
	ok := 0
	for i := range 12 {
		r := e.Do("POST", "/api/v2/agent/"+a.ID+"/chat", "", fmt.Sprintf(`{"query":"q","conversationId":"c%d","visitorId":"v%d"}`, i, i%2))
		switch r.Status {
		case 200:
			ok++
		case 429:
			eb := r.Err(t)
			require.Equal(t, "RATE_LIMIT_EXCEEDED", eb.Error.Code)
			require.NotNil(t, eb.Error.RetryAfter)
		default:
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
	}
	// Two visitors, one IP: the per-IP count on the owner's free plan (10/min) decides.
	require.Equal(t, 10, ok)
	c := parleyv1connect.NewChatServiceClient(http.DefaultClient, e.URL)
	_, err := c.Chat(context.Background(), &parleyv1.ChatRequest{AgentId: a.ID, Query: "q", ConversationId: "x", VisitorId: "v9"})
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err))
}

func TestProviderFailures(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply { return testenv.FakeReply{Status: 500} }
	status, _, raw := f.chat(t, f.private, f.A.Key, `{"query":"q","conversationId":"fail-1"}`)
	require.Equal(t, http.StatusBadGateway, status, "%s", raw.Body)
	require.Equal(t, "UPSTREAM_ERROR", raw.Err(t).Error.Code)
	require.NotContains(t, string(raw.Body), f.fake.URL)

	// Before anything went out, a stream fails as any request does: the
	// error's status and the JSON error body (SPEC §7).
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply { return testenv.FakeReply{Status: 429} }
	failed := f.Post("/api/v2/agent/"+f.private+"/chat", bearer(f.A.Key), `{"query":"q","conversationId":"fail-2","streaming":true}`)
	defer failed.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, failed.StatusCode)
	require.Equal(t, "application/json; charset=utf-8", failed.Header.Get("Content-Type"))
	var first struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.NewDecoder(failed.Body).Decode(&first))
	require.Equal(t, "UPSTREAM_UNAVAILABLE", first.Error.Code)
	require.NotContains(t, first.Error.Message, f.fake.URL)

	// After tokens went out: an error event, then [DONE]; the partial answer is stored as incomplete.
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"Partial", " answer", " never", " finished"}, CutAfter: 2}
	}
	resp := f.Post("/api/v2/agent/"+f.private+"/chat", bearer(f.A.Key), `{"query":"q","conversationId":"fail-3","streaming":true}`)
	defer resp.Body.Close()
	events := testenv.ReadSSE(t, resp.Body)
	var types []string
	for _, ev := range events {
		var m map[string]any
		if json.Unmarshal([]byte(ev.Data), &m) == nil {
			types = append(types, fmt.Sprint(m["type"]))
		} else {
			types = append(types, ev.Data)
		}
	}
	require.Equal(t, []string{"token", "token", "error", "[DONE]"}, types)
	content, incomplete := lastAnswer(t, f, "fail-3")
	require.Equal(t, "Partial answer", content)
	require.True(t, incomplete)

	// The answer cannot be stored after tokens went out (its conversation
	// was deleted meanwhile): the stream still ends, with an error event
	// that says so (NOT_FOUND, not a server error) and [DONE], not cut
	// short.
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"Soon", " gone", " for", " good"}, Delay: 150 * time.Millisecond}
	}
	resp = f.Post("/api/v2/agent/"+f.private+"/chat", bearer(f.A.Key), `{"query":"q","conversationId":"fail-4","streaming":true}`)
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		if strings.Contains(line, `"type":"token"`) {
			break
		}
	}
	ctx := context.Background()
	tx, err := f.App.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.A.ID.String())
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, "DELETE FROM conversations WHERE org_id = $1 AND id = 'fail-4'", f.A.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	require.NoError(t, tx.Commit(ctx))
	var last []string
	for _, ev := range testenv.ReadSSE(t, rd) {
		var m struct {
			Type  string
			Error struct{ Code string }
		}
		if json.Unmarshal([]byte(ev.Data), &m) == nil {
			last = append(last, m.Type+" "+m.Error.Code)
		} else {
			last = append(last, ev.Data)
		}
	}
	require.GreaterOrEqual(t, len(last), 2, "%v", last)
	require.Equal(t, []string{"error NOT_FOUND", "[DONE]"}, last[len(last)-2:], "%v", last)
}

// lastAnswer reads the stored assistant message of a conversation of A,
// waiting up to 5 s for it.
func lastAnswer(t *testing.T, f *fixture, conv string) (string, bool) {
	t.Helper()
	return lastAnswerWithin(t, f, conv, 5*time.Second)
}

// lastAnswerWithin is lastAnswer waiting up to wait.
func lastAnswerWithin(t *testing.T, f *fixture, conv string, wait time.Duration) (string, bool) {
	t.Helper()
	ctx := context.Background()
	var content string
	var incomplete bool
	require.Eventually(t, func() bool {
		tx, err := f.App.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.A.ID.String())
		require.NoError(t, err)
		err = tx.QueryRow(ctx, `SELECT content, incomplete FROM messages WHERE conversation_id = $1 AND role = 'assistant'
			ORDER BY created_at DESC, id DESC LIMIT 1`, conv).Scan(&content, &incomplete)
		return err == nil
	}, wait, 50*time.Millisecond, "no assistant message stored for %s", conv)
	return content, incomplete
}

func TestHistoryFitsTheModelsBudget(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, func(c *server.Config) {
		m := llm.NewOpenAI(llm.OpenAIConfig{Name: "openai", APIKey: "k", BaseURL: fake.URL + "/v1"})
		// A tiny context window: 4096 for the answer leaves room for about 200
		// tokens of history.
		c.Catalog = llm.NewCatalog(llm.Route{Name: "gpt-4o-mini", Upstream: "small", Model: m, ContextTokens: 4096 + 220})
	})
	r := e.Do("POST", "/api/agents", e.A.Key, `{"name":"n","instructions":"i"}`)
	var a struct{ ID string }
	r.JSON(t, &a)
	long := strings.Repeat("word ", 60) // about 60 tokens a message
	for i := range 4 {
		r := e.Do("POST", "/api/v2/agent/"+a.ID+"/chat", e.A.Key, fmt.Sprintf(`{"query":"%d %s","conversationId":"budget"}`, i, long))
		require.Equal(t, 200, r.Status, "%s", r.Body)
	}
	last := fake.Requests()[3]["messages"].([]any)
	// system + the newest history that fits + the question: not all 6 past messages.
	require.Less(t, len(last), 1+6+1)
	require.Greater(t, len(last), 2, "some history fits")
	lastHist := last[len(last)-2].(map[string]any)
	require.Equal(t, "assistant", lastHist["role"], "the newest history is kept first")
}

// Behind a trusted reverse proxy, per-IP limits count per client (the
// rightmost address of X-Forwarded-For the proxy does not vouch for);
// without one, the header changes nothing.
func TestPublicAgentLimitsBehindATrustedProxy(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, c := range []struct {
		name    string
		trusted []netip.Prefix
		wantOK  int
	}{
		// 20 requests: 7 from one client, 13 from another (10 of which pass),
		// each with another made-up address on the left.
		{"trusted", loopback, 17},
		// The header is ignored: one address, 10/min.
		{"not trusted", nil, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := testenv.New(t, testenv.WithFakeModels(fake), func(cfg *server.Config) { cfg.TrustedProxies = c.trusted })
			free := e.Bootstrap("Free", "free")
			r := e.Do("POST", "/api/agents", free.Key, `{"name":"Pub","instructions":"i","visibility":"public"}`)
			var a struct{ ID string }
			r.JSON(t, &a)
			ok := 0
			for i := range 20 {
				// The left part is what a client may write itself: it must not
				// pick the bucket.
				client := i % 2
				if i >= 14 {
					client = 0
				}
				xff := fmt.Sprintf("192.0.2.%d, 203.0.113.%d", i, client)
				resp := e.Post("/api/v2/agent/"+a.ID+"/chat", map[string]string{"X-Forwarded-For": xff},
					fmt.Sprintf(`{"query":"q","conversationId":"c%d","visitorId":"v%d"}`, i, i))
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok++
				} else {
					require.Equal(t, 429, resp.StatusCode)
				}
			}
			require.Equal(t, c.wantOK, ok)
		})
	}
}

// First messages racing on one new conversation id all join it: the loser
// of the insert reads the winner's conversation (it used to get 409).
func TestFirstMessagesRacingJoinOneConversation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 8
	statuses := make(chan int, n)
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, rep, _ := f.chat(t, f.private, f.A.Key, `{"query":"Hi","conversationId":"race-1"}`)
			statuses <- status
			ids <- rep.ConversationID
		}()
	}
	wg.Wait()
	close(statuses)
	close(ids)
	for s := range statuses {
		require.Equal(t, http.StatusOK, s)
	}
	for id := range ids {
		require.Equal(t, "race-1", id)
	}
	r := f.Do("GET", "/api/v2/agent/"+f.private+"/conversations", f.A.Key, nil)
	var list struct {
		Conversations []struct {
			ID            string
			MessagesCount int
		}
	}
	r.JSON(t, &list)
	require.Len(t, list.Conversations, 1)
	require.Equal(t, 2*n, list.Conversations[0].MessagesCount)
}

// A provider that goes quiet mid-answer fails the turn with the provider
// timeout once its idle deadline (llm.Timeouts) passes, well before the
// turn's own deadline, and the stalled call is closed.
func TestProviderStallTimesOut(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"Partial", " answer", " never", " sent"}, StallAfter: 2}
	}
	e := testenv.New(t, func(c *server.Config) {
		hc := llm.NewHTTPClient(llm.Timeouts{Headers: time.Second, Idle: 300 * time.Millisecond})
		m := llm.NewOpenAI(llm.OpenAIConfig{Name: "openai", APIKey: "k", BaseURL: fake.URL + "/v1", HTTPClient: hc})
		c.Catalog = llm.NewCatalog(llm.Route{Name: "gpt-4o-mini", Upstream: "small", Model: m})
		c.TurnTimeout = time.Minute
	})
	r := e.Do("POST", "/api/agents", e.A.Key, `{"name":"n","instructions":"i"}`)
	var a struct{ ID string }
	r.JSON(t, &a)
	r = e.Do("POST", "/api/v2/agent/"+a.ID+"/chat", e.A.Key, `{"query":"q","conversationId":"stall"}`)
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "the model provider openai timed out")
	require.Eventually(t, func() bool { return fake.Canceled() == 1 }, 5*time.Second, 20*time.Millisecond, "the stalled call was closed")
}
