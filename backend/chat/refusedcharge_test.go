package chat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/testenv"
)

// A streaming turn of an agent with knowledge sends its sources before the
// model is called. When the provider then refuses the call (429, 5xx)
// before producing anything, nothing was generated: the turn is not a
// turn the organization pays for, and no empty answer joins the
// conversation. It used to store an empty incomplete answer charged with
// the whole prompt's estimated tokens, a turn in the usage report.
func TestRefusedStreamingTurnIsNotCharged(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	f := &fixture{Env: testenv.New(t, testenv.WithWorkers, testenv.WithFakeModels(fake)), fake: fake}
	store, _ := f.datastore(t, "Opening hours are nine to five.")
	agent := f.agent(t, fmt.Sprintf(`{"name":"K","instructions":"i","datastores":[%q]}`, store))

	f.fake.Reply = func(int, map[string]any) testenv.FakeReply { return testenv.FakeReply{Status: 429} }
	resp := f.Post("/api/v2/agent/"+agent+"/chat", bearer(f.A.Key), `{"query":"What are the opening hours?","conversationId":"refused","streaming":true}`)
	defer resp.Body.Close()
	var types []string
	for _, ev := range testenv.ReadSSE(t, resp.Body) {
		var m map[string]any
		if json.Unmarshal([]byte(ev.Data), &m) == nil {
			types = append(types, fmt.Sprint(m["type"]))
		} else {
			types = append(types, ev.Data)
		}
	}
	require.Contains(t, types, "source", "the passage went out before the model was called: %v", types)
	require.Equal(t, []string{"error", "[DONE]"}, types[len(types)-2:])
	turns, tokens, cost := usageToday(t, f)
	require.Zero(t, turns, "a refused call is no turn")
	require.Zero(t, tokens, "a refused call uses nothing")
	require.Zero(t, cost, "a refused call costs nothing")

	// A reply the provider's content filter ended before anything was
	// said is no answer either: a 502 naming the reason, not an empty
	// answer stored and shown as one (the provider asked once).
	calls := len(f.fake.Requests())
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply { return testenv.FakeReply{Finish: "content_filter"} }
	r := f.Do("POST", "/api/v2/agent/"+agent+"/chat", f.A.Key, `{"query":"Say something the filter stops.","conversationId":"filtered"}`)
	require.Equal(t, 502, r.Status, "%s", r.Body)
	require.Contains(t, r.Err(t).Error.Message, "without an answer (content_filter)")
	require.Len(t, f.fake.Requests(), calls+1, "asked once")
	r = f.Do("GET", "/api/v2/conversations/filtered", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var conv struct{ Messages []struct{ Role, Text string } }
	r.JSON(t, &conv)
	require.Len(t, conv.Messages, 1, "the question alone: %+v", conv.Messages)
	require.Equal(t, "user", conv.Messages[0].Role)
	// The provider billed that call (11 prompt, 5 completion tokens,
	// fakeopenai.End): it is charged, as no turn.
	turns, tokens, _ = usageToday(t, f)
	require.Zero(t, turns, "an unanswered call is no turn")
	require.EqualValues(t, 16, tokens, "the filtered call's usage is charged")
}

// A reply that ended before its answer began but was billed (a thinking
// model whose bound went on its reasoning, a filter that stopped what it
// wrote) reports its usage. It was dropped with the reply: a visitor whose
// questions make the model think to its bound cost the organization
// thousands of output tokens a call, none of them in its usage, whether the
// call was the turn's only one or followed a tool round.
func TestUnansweredCallIsCharged(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Finish: "length", Usage: &llm.Usage{PromptTokens: 40, CompletionTokens: 4000}}
	}
	r := f.Do("POST", "/api/v2/agent/"+f.private+"/chat", f.A.Key, `{"query":"Think hard about this.","conversationId":"thought-out"}`)
	require.Equal(t, 502, r.Status, "%s", r.Body)
	turns, tokens, cost := usageToday(t, f)
	require.Zero(t, turns, "no answer: no turn")
	require.EqualValues(t, 4040, tokens, "the call's billed tokens are counted")
	require.InDelta(t, 40*1/1e6+4000*2/1e6, cost, 1e-12, "the fake route's prices, 1 and 2 per million")

	// After a tool round, the call that ended so is counted with the round's.
	agent := f.agent(t, `{"name":"Leads","instructions":"Collect leads.","tools":["lead_capture"]}`)
	f.fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 2 {
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "lead_capture", Arguments: `{"email":"ada@example.com"}`}}}
		}
		return testenv.FakeReply{Finish: "length", Usage: &llm.Usage{PromptTokens: 60, CompletionTokens: 4000}}
	}
	r = f.Do("POST", "/api/v2/agent/"+agent+"/chat", f.A.Key, `{"query":"I am ada@example.com","conversationId":"round-thought-out"}`)
	require.Equal(t, 502, r.Status, "%s", r.Body)
	require.Len(t, f.fake.Requests(), 3)
	turns, tokens, _ = usageToday(t, f)
	require.EqualValues(t, 1, turns, "the round's call is stored as an incomplete answer")
	require.EqualValues(t, 4040+16+4060, tokens, "the tool round's call and the one after it are counted")
}

// usageToday sums f.A's usage of the last hour: turns, tokens and cost.
func usageToday(t *testing.T, f *fixture) (turns, tokens int64, cost float64) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, f.App.Store.Tenant(ctx, f.A.ID, func(q *dbq.Queries) error {
		rows, err := q.UsageByDayAndAgent(ctx, dbq.UsageByDayAndAgentParams{OrgID: f.A.ID, Since: time.Now().Add(-time.Hour)})
		for _, row := range rows {
			turns += row.Turns
			tokens += row.Tokens
			cost += row.Cost
		}
		return err
	}))
	return turns, tokens, cost
}
