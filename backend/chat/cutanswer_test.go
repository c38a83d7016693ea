package chat_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/testenv"
)

// A reply the provider stopped mid-answer, at the reply's bound
// (finish_reason length) or by its content filter, is an answer cut
// short: the client gets what came, and it is stored marked incomplete,
// as conversation.proto's Message.incomplete says. It was stored as a
// whole answer.
func TestAnswerStoppedAtItsBoundIsStoredIncomplete(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.fake.Reply = func(_ int, body map[string]any) testenv.FakeReply {
		switch body["messages"].([]any)[len(body["messages"].([]any))-1].(map[string]any)["content"] {
		case "long":
			return testenv.FakeReply{Tokens: []string{"The plan ", "costs"}, Finish: "length"}
		case "filtered":
			return testenv.FakeReply{Tokens: []string{"Well, "}, Finish: "content_filter"}
		}
		return testenv.FakeReply{Tokens: []string{"Whole."}}
	}
	for _, tc := range []struct {
		query, answer string
		incomplete    bool
	}{
		{"long", "The plan costs", true},
		{"filtered", "Well, ", true},
		{"short", "Whole.", false},
	} {
		status, rep, raw := f.chat(t, f.private, f.A.Key, `{"query":"`+tc.query+`","conversationId":"cut-`+tc.query+`"}`)
		require.Equal(t, http.StatusOK, status, "%s", raw.Body)
		require.Equal(t, tc.answer, rep.Answer)
		content, incomplete := lastAnswer(t, f, "cut-"+tc.query)
		require.Equal(t, tc.answer, content)
		require.Equal(t, tc.incomplete, incomplete, tc.query)
	}
}

// A reply stopped at its bound in its tool calls' arguments is followed,
// once the calls ran, by another: the answer that reply gives is whole.
func TestCutToolRoundDoesNotMarkTheAnswer(t *testing.T) {
	t.Parallel()
	f := setup(t)
	agent := f.agent(t, `{"name":"Leads","instructions":"Collect leads.","tools":["lead_capture"]}`)
	f.fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 1 {
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "lead_capture", Arguments: `{"email":"ada@exa`}}, Finish: "length"}
		}
		return testenv.FakeReply{Tokens: []string{"Noted."}}
	}
	status, rep, raw := f.chat(t, agent, f.A.Key, `{"query":"I am ada@example.com","conversationId":"cut-round"}`)
	require.Equal(t, http.StatusOK, status, "%s", raw.Body)
	require.Equal(t, "Noted.", rep.Answer)
	require.Len(t, f.fake.Requests(), 2)
	content, incomplete := lastAnswer(t, f, "cut-round")
	require.Equal(t, "Noted.", content)
	require.False(t, incomplete)
}
