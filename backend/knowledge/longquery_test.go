package knowledge_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/embed"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// openAIEmbeddings is an OpenAI embeddings endpoint that, as OpenAI's
// text-embedding-3 models do, refuses an input of more than 8,191 tokens
// (400 invalid_request_error). It counts words, fewer than the tokens of
// any tokenizer: what it refuses, OpenAI refuses too. longest is the
// longest input it was sent, in bytes.
type openAIEmbeddings struct {
	URL     string
	mu      sync.Mutex
	longest int
}

func newOpenAIEmbeddings(t *testing.T, dim int) *openAIEmbeddings {
	f := &openAIEmbeddings{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Input []string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		var data []map[string]any
		for i, in := range body.Input {
			f.mu.Lock()
			f.longest = max(f.longest, len(in))
			f.mu.Unlock()
			if len(strings.Fields(in)) > 8191 {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"error":{"message":"This model's maximum context length is 8192 tokens, however you requested more tokens. Please reduce your prompt.","type":"invalid_request_error","param":null,"code":null}}`))
				return
			}
			v := make([]float64, dim)
			v[i%dim] = 1
			data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": v})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": "text-embedding-3-small"})
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// A chat message may hold 32,000 characters, and the agent's knowledge is
// searched with it: its embedding was asked of the whole, which OpenAI's
// embedder refuses past 8,191 tokens, and the turn failed as a 500 over
// Connect and REST (v2 and v1), before the model was asked. The vector
// half embeds the message's first knowledge.MaxEmbeddedQuery bytes; the
// turn is answered. Query's longest query is searched too.
func TestLongQueryIsEmbeddedWithinTheEmbeddersBound(t *testing.T) {
	t.Parallel()
	emb := newOpenAIEmbeddings(t, 1536)
	fake := testenv.NewFakeProvider(t)
	e := testenv.New(t, testenv.WithFakeModels(fake), func(c *server.Config) {
		c.Embedder = embed.NewOpenAI("sk-fake", emb.URL+"/v1", "text-embedding-3-small", 1536)
	})
	ctx := context.Background()
	opt := connect.WithInterceptors(testenv.Bearer(e.A.Key))
	ds := parleyv1connect.NewDatastoreServiceClient(http.DefaultClient, e.URL, opt)
	agents := parleyv1connect.NewAgentServiceClient(http.DefaultClient, e.URL, opt)
	chat := parleyv1connect.NewChatServiceClient(http.DefaultClient, e.URL, opt)
	store, err := ds.CreateDatastore(ctx, &parleyv1.CreateDatastoreRequest{Name: "Docs"})
	require.NoError(t, err)
	a, err := agents.CreateAgent(ctx, &parleyv1.CreateAgentRequest{Name: "Bot", Instructions: "Help.", Datastores: []string{store.GetDatastore().GetId()}})
	require.NoError(t, err)
	agent := a.GetAgent().GetId()

	// The schema's bound: 32,000 characters, 16,000 words (and tokens).
	longest := strings.TrimSpace(strings.Repeat("a ", 16000))
	longest += strings.Repeat("b", 32000-len(longest))
	require.Len(t, longest, 32000)
	words := strings.TrimSpace(strings.Repeat("é ", 5000)) // 10,000 characters, 14,999 bytes

	for i, c := range []struct {
		name  string
		query string
	}{
		{"short", "how do I return a parcel?"},
		{"at the bound", longest},
		{"multibyte, cut between characters", strings.Repeat("é", 16000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := chat.Chat(ctx, &parleyv1.ChatRequest{AgentId: agent, Query: c.query, ConversationId: "connect-" + strconv.Itoa(i)})
			require.NoError(t, err)
			body, _ := json.Marshal(map[string]any{"query": c.query, "conversationId": "rest-" + strconv.Itoa(i)})
			r := e.Do("POST", "/api/v2/agent/"+agent+"/chat", e.A.Key, body)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			r = e.Do("POST", "/api/agents/"+agent+"/query", e.A.Key, body)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		})
	}
	// Past the bound is still the schema's 400, naming the field.
	_, err = chat.Chat(ctx, &parleyv1.ChatRequest{AgentId: agent, Query: longest + "a", ConversationId: "past"})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), "query")

	_, err = ds.Query(ctx, &parleyv1.QueryRequest{DatastoreId: store.GetDatastore().GetId(), Query: words})
	require.NoError(t, err)
	emb.mu.Lock()
	defer emb.mu.Unlock()
	require.LessOrEqual(t, emb.longest, knowledge.MaxEmbeddedQuery)
	require.Equal(t, "é", knowledge.EmbeddedQuery(strings.Repeat("é", 16000))[knowledge.MaxEmbeddedQuery-2:], "cut between characters")
}
