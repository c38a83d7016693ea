package chat_test

import (
	"context"
	"fmt"
	"strings"
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

// A call cut mid-answer is counted by Parley's estimate of its prompt. The
// estimate counted the agent's instructions but not the retrieved passages
// the providers send with them, often most of the prompt: a turn of an
// agent with knowledge whose stream broke off was charged a fraction of
// the prompt the provider billed.
func TestCutCallCountsItsKnowledge(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	f := &fixture{Env: testenv.New(t, testenv.WithWorkers, testenv.WithFakeModels(fake)), fake: fake}
	ctx := context.Background()
	text := "Opening hours are nine to five on weekdays. " + strings.Repeat("The shop on the harbour sells maps, charts, compasses and rope to visiting sailors. ", 8)
	store, _ := f.datastore(t, text)
	agent := f.agent(t, fmt.Sprintf(`{"name":"K","instructions":"i","datastores":[%q]}`, store))

	f.fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"Nine", " to", " five."}, CutAfter: 1}
	}
	const query = "What are the opening hours?"
	resp := f.Post("/api/v2/agent/"+agent+"/chat", bearer(f.A.Key), `{"query":"`+query+`","conversationId":"cut-knowledge","streaming":true}`)
	defer resp.Body.Close()
	testenv.ReadSSE(t, resp.Body)
	system := promptOf(t, f.fake, 0)[0]
	require.Equal(t, "system", system["role"])
	require.Contains(t, system["content"], "sailors", "the passage is in the prompt")

	tx, err := f.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.A.ID.String())
	require.NoError(t, err)
	var prompt int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT prompt_tokens FROM messages
		WHERE conversation_id = 'cut-knowledge' AND role = 'assistant'`).Scan(&prompt))
	require.GreaterOrEqual(t, prompt, int64(llm.CountTokens(system["content"].(string))+llm.CountTokens(query)),
		"the prompt sent, passages and all, is counted")
}

// A server that reports no usage is counted by Parley's estimate, call by
// call. A call that answered with tool calls only (no text) was not
// counted at all: a turn with a tool round was charged the last call's
// prompt alone, though each call's prompt was processed, and nothing for
// the calls' arguments, which the model wrote.
func TestToolCallWithoutUsageIsCounted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	agent := f.agent(t, `{"name":"Leads","instructions":"Collect leads.","tools":["lead_capture"]}`)
	const args = `{"email":"ada@example.com","name":"Ada Lovelace","note":"call back about the harbour maps"}`
	f.fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 1 {
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "lead_capture", Arguments: args}}, NoUsage: true}
		}
		return testenv.FakeReply{Tokens: []string{"Thanks, noted."}, NoUsage: true}
	}
	resp := f.Post("/api/v2/agent/"+agent+"/chat", bearer(f.A.Key), `{"query":"I am ada@example.com, please call me back","conversationId":"no-usage","streaming":true}`)
	defer resp.Body.Close()
	testenv.ReadSSE(t, resp.Body)
	require.Len(t, f.fake.Requests(), 2)
	// What both calls were given, their messages' text (a lower bound of
	// the estimate, which also counts the tool call).
	sent := 0
	for i := range 2 {
		for _, m := range promptOf(t, f.fake, i) {
			if c, ok := m["content"].(string); ok {
				sent += llm.CountTokens(c)
			}
		}
	}

	ctx := context.Background()
	tx, err := f.App.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", f.A.ID.String())
	require.NoError(t, err)
	var prompt, completion int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT prompt_tokens, completion_tokens FROM messages
		WHERE conversation_id = 'no-usage' AND role = 'assistant'`).Scan(&prompt, &completion))
	require.GreaterOrEqual(t, prompt, int64(sent), "both calls' prompts are counted")
	require.GreaterOrEqual(t, completion, int64(llm.CountTokens("Thanks, noted.")+llm.CountTokens(args)), "the tool call's arguments are counted")
}

// A server that reports a negative count (an OpenAI-compatible one with a
// bug) gives the organization no credit: the turn is stored, reported and
// charged with none of those tokens, where its cost went negative.
func TestNegativeUsageIsCountedAsNone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"Fine."}, Usage: &llm.Usage{PromptTokens: -5, CompletionTokens: 20}}
	}
	r := f.Do("POST", "/api/v2/agent/"+f.private+"/chat", f.A.Key, `{"query":"Hi","conversationId":"negative"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var rep struct {
		Usage struct {
			PromptTokens, CompletionTokens int64
			Cost                           float64
		}
	}
	r.JSON(t, &rep)
	require.Zero(t, rep.Usage.PromptTokens)
	require.EqualValues(t, 20, rep.Usage.CompletionTokens)
	require.InDelta(t, 20*2/1e6, rep.Usage.Cost, 1e-12, "the fake route's output price, 2 per million")
}
