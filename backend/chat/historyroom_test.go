package chat_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/testenv"
)

// A chat API counts a message's role and delimiters beside its text
// (OpenAI: 3 tokens a message, and 3 that prime the reply; a chat
// template's special tokens on vLLM), and refuses a request whose prompt
// so counted and bound pass the window. The history of a long
// conversation of short messages filled what the text alone left, and its
// 200 messages' own tokens took the request past a small window (a models
// file's contextTokens): every later turn of the conversation failed.
func TestHistoryCountsEachMessage(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	const window = 8192
	e := smallWindow(t, fake, window)
	f := &fixture{Env: e, fake: fake}
	agent := f.agent(t, `{"name":"n","instructions":"Answer briefly."}`)
	status, _, raw := f.chat(t, agent, f.A.Key, `{"query":"Hello","conversationId":"short-messages"}`)
	require.Equal(t, http.StatusOK, status, "%s", raw.Body)

	// 200 earlier messages of some 25 tokens each: more than the history
	// budget holds.
	ctx := context.Background()
	require.NoError(t, f.App.Store.TenantTx(ctx, f.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		for i := range 200 {
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			content := fmt.Sprintf("Message %d: %s", i, strings.Repeat("tell me more about it ", 4))
			if _, err := tx.Exec(ctx, `INSERT INTO messages (org_id, id, conversation_id, role, content, channel, created_at)
				VALUES ($1, gen_random_uuid(), 'short-messages', $2, $3, 'api', now() - interval '1 hour' + $4 * interval '1 second')`,
				f.A.ID, role, content, i); err != nil {
				return err
			}
		}
		return nil
	}))

	status, _, raw = f.chat(t, agent, f.A.Key, `{"query":"And then?","conversationId":"short-messages"}`)
	require.Equal(t, http.StatusOK, status, "%s", raw.Body)
	reqs := fake.Requests()
	req := reqs[len(reqs)-1]
	msgs := req["messages"].([]any)
	require.Greater(t, len(msgs), 100, "a long history fits")
	sent := openAIPromptTokens(req)
	bound := int(req["max_completion_tokens"].(float64))
	require.LessOrEqual(t, sent+bound, window, "%d messages: prompt %d tokens + answer %d fit the window", len(msgs), sent, bound)
}
