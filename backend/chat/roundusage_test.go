package chat_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/testenv"
)

// A model call cut mid-answer reports no usage. When an earlier call of the
// turn (a tool round) did, the cut call's tokens were not counted at all:
// the turn was charged for its first call only, though the provider
// billed the second (the longer prompt, and what it said), so a client
// whose turns break off after a tool round was charged a fraction.
func TestCutCallAfterAToolRoundIsCounted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	agent := f.agent(t, `{"name":"Leads","instructions":"Collect leads.","tools":["lead_capture"]}`)
	f.fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 1 {
			// Usage 11 prompt, 5 completion tokens (fakeopenai.End).
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "lead_capture", Arguments: `{"email":"ada@example.com"}`}}}
		}
		return testenv.FakeReply{Tokens: []string{"Thanks, noted", " your address", " and more", " words"}, CutAfter: 2}
	}
	resp := f.Post("/api/v2/agent/"+agent+"/chat", bearer(f.A.Key), `{"query":"I am ada@example.com, please call me back","conversationId":"cut-round","streaming":true}`)
	defer resp.Body.Close()
	testenv.ReadSSE(t, resp.Body)
	require.Len(t, f.fake.Requests(), 2)

	content, incomplete := lastAnswer(t, f, "cut-round")
	require.Equal(t, "Thanks, noted your address", content)
	require.True(t, incomplete)
	ctx := context.Background()
	tx, err := f.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.A.ID.String())
	require.NoError(t, err)
	var prompt, completion int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT prompt_tokens, completion_tokens FROM messages
		WHERE conversation_id = 'cut-round' AND role = 'assistant'`).Scan(&prompt, &completion))
	require.Greater(t, prompt, int64(11), "the second call's prompt is counted")
	require.Greater(t, completion, int64(5), "what the second call said is counted")
}
