package tool_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/handoff"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/tool"
)

// conversationOf is a conversation of org as stored.
func conversationOf(t *testing.T, e *testenv.Env, org testenv.Org, conv string) dbq.Conversation {
	t.Helper()
	var c dbq.Conversation
	ctx := context.Background()
	require.NoError(t, e.App.Store.Tenant(ctx, org.ID, func(q *dbq.Queries) error {
		var err error
		c, err = q.GetConversation(ctx, dbq.GetConversationParams{OrgID: org.ID, ID: conv})
		return err
	}))
	return c
}

// statusOf is a conversation's status in org.
func statusOf(t *testing.T, e *testenv.Env, org testenv.Org, conv string) string {
	t.Helper()
	return conversationOf(t, e, org, conv).Status
}

// tokens is a stream's text.
func tokens(events []map[string]any) string {
	var b strings.Builder
	for _, ev := range ofType(events, "token") {
		b.WriteString(ev["value"].(string))
	}
	return b.String()
}

// request_human against a scripted model: the conversation waits for
// people, the model is not called again in the turn, and the visitor reads
// that a person will answer (after whatever the model said first).
func TestRequestHuman(t *testing.T) {
	t.Parallel()
	fp := testenv.NewFakeProvider(t)
	fp.Reply = actor
	e := testenv.New(t, testenv.WithFakeModels(fp))
	id := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.RequestHuman}})["id"].(string)
	// B has a conversation with the same client id.
	idB := createAgent(t, e, e.B.Key, map[string]any{"tools": []string{tool.RequestHuman}})["id"].(string)
	r := e.Do("POST", "/api/v2/agent/"+idB+"/chat", e.B.Key, `{"query":"hello","conversationId":"h-1"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	calls := len(fp.Requests())

	events := streamEvents(t, e, id, e.A.Key, `{"query":"say:Let me find someone.|human:{\"reason\":\"The visitor wants a refund.\"}","conversationId":"h-1","streaming":true}`)
	tc := ofType(events, "tool_call")
	require.Len(t, tc, 1)
	require.Equal(t, tool.RequestHuman, tc[0]["name"])
	require.Equal(t, "ok", tc[0]["status"])
	require.Equal(t, "handed to people", tc[0]["result"])
	require.JSONEq(t, `{"reason":"The visitor wants a refund."}`, tc[0]["arguments"].(string))
	require.Equal(t, "Let me find someone.\n\n"+handoff.DefaultMessage, tokens(events))
	require.Len(t, ofType(events, "done"), 1)
	require.Len(t, fp.Requests(), calls+1, "the model is not called after the hand-off")
	require.Equal(t, []string{tool.RequestHuman}, req(fp.Requests()[calls]).offered())

	c := conversationOf(t, e, e.A, "h-1")
	require.Equal(t, handoff.HumanRequested, c.Status)
	require.Equal(t, "The visitor wants a refund.", c.StatusReason, "the model's reason, for the people taking over")
	require.Equal(t, handoff.ByAgent, c.StatusBy)
	// SECURITY: B's conversation of the same id is untouched.
	require.Equal(t, "unresolved", statusOf(t, e, e.B, "h-1"))

	// The JSON reply carries the same answer, stored with the conversation.
	r = e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"human:{}","conversationId":"h-2"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var rep struct{ Answer string }
	r.JSON(t, &rep)
	require.Equal(t, handoff.DefaultMessage, rep.Answer, "a call without a reason still hands over")
	require.Equal(t, "human_requested", statusOf(t, e, e.A, "h-2"))

	// Arguments that are not an object: an error result, the model goes on,
	// nothing changes.
	events = streamEvents(t, e, id, e.A.Key, `{"query":"human:[1]","conversationId":"h-3","streaming":true}`)
	tc = ofType(events, "tool_call")
	require.Len(t, tc, 1)
	require.Equal(t, "error", tc[0]["status"])
	require.True(t, strings.HasPrefix(tokens(events), "Done: "), tokens(events))
	require.Equal(t, "unresolved", statusOf(t, e, e.A, "h-3"))

	// A reason holding NUL (JSON's \u0000), which Postgres refuses in text:
	// an error result the model can correct, not a failed turn.
	events = streamEvents(t, e, id, e.A.Key, `{"query":"human:{\"reason\":\"refund\\u0000\"}","conversationId":"h-6","streaming":true}`)
	tc = ofType(events, "tool_call")
	require.Len(t, tc, 1)
	require.Equal(t, "error", tc[0]["status"])
	require.Contains(t, tc[0]["result"], "reason: must be UTF-8 text without NUL characters")
	require.Len(t, ofType(events, "done"), 1, "the turn completes")
	require.True(t, strings.HasPrefix(tokens(events), "Done: "), tokens(events))
	require.Equal(t, "unresolved", statusOf(t, e, e.A, "h-6"))

	// The agent's own handoff message is what the visitor reads.
	own := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.RequestHuman}, "handoffMessage": "Our team replies within the hour."})["id"].(string)
	r = e.Do("POST", "/api/v2/agent/"+own+"/chat", e.A.Key, `{"query":"human:{\"reason\":\"x\"}","conversationId":"h-5"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &rep)
	require.Equal(t, "Our team replies within the hour.", rep.Answer)

	// Not listed: not offered, nothing changes.
	other := createAgent(t, e, e.A.Key, map[string]any{})["id"].(string)
	r = e.Do("POST", "/api/v2/agent/"+other+"/chat", e.A.Key, `{"query":"human:{}","conversationId":"h-4"}`)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "unresolved", statusOf(t, e, e.A, "h-4"))
}

// A model that calls request_human beside another tool: both run, the turn
// ends after the round.
func TestRequestHumanEndsTheRound(t *testing.T) {
	t.Parallel()
	fp := testenv.NewFakeProvider(t)
	fp.Reply = func(_ int, body map[string]any) testenv.FakeReply {
		if req(body).last()["role"] == "tool" {
			return testenv.FakeReply{Tokens: []string{"should not be called"}}
		}
		return testenv.FakeReply{ToolCalls: []llm.ToolCall{
			{ID: "rh_1", Name: tool.RequestHuman, Arguments: `{"reason":"asked"}`},
			{ID: "lc_1", Name: tool.LeadCapture, Arguments: `{"email":"zoe@example.com"}`},
		}}
	}
	e := testenv.New(t, testenv.WithFakeModels(fp))
	id := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.RequestHuman, tool.LeadCapture}})["id"].(string)
	events := streamEvents(t, e, id, e.A.Key, `{"query":"zoe@example.com, a person please","conversationId":"both","streaming":true}`)
	tc := ofType(events, "tool_call")
	require.Len(t, tc, 2)
	require.Equal(t, "ok", tc[0]["status"])
	require.Equal(t, "ok", tc[1]["status"])
	require.Equal(t, handoff.DefaultMessage, tokens(events))
	require.Len(t, fp.Requests(), 1)
	_, ok := contactOf(t, e, e.A.Key, "zoe@example.com")
	require.True(t, ok)
}

// With no provider keys, the offline engine hands the conversation over
// when the visitor asks for a person, only for an agent that lists
// request_human.
func TestRequestHumanLocalEngine(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	id := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.RequestHuman}})["id"].(string)
	events := streamEvents(t, e, id, e.A.Key, `{"query":"This is not working. Can I talk to a human?","conversationId":"lh-1","streaming":true}`)
	tc := ofType(events, "tool_call")
	require.Len(t, tc, 1)
	require.Equal(t, tool.RequestHuman, tc[0]["name"])
	require.Contains(t, tc[0]["arguments"], "The visitor asked for a person")
	require.Equal(t, handoff.DefaultMessage, tokens(events))
	require.Equal(t, "human_requested", statusOf(t, e, e.A, "lh-1"))
	// The turn's own handoff does not keep its answer from being stored
	// (people taking over meanwhile would: chat.CreateAnswer).
	done := ofType(events, "done")
	require.Len(t, done, 1)
	require.NotEmpty(t, done[0]["messageId"], "the handoff turn's answer was not stored: %v", done[0])
	// From then on the engine is silent: the visitor reads the handoff
	// message, and no tool is called.
	r := e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"Hello? Can I talk to a human?","conversationId":"lh-1"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var rep struct {
		Answer   string
		Metadata struct{ Handoff bool }
	}
	r.JSON(t, &rep)
	require.Equal(t, handoff.DefaultMessage, rep.Answer)
	require.True(t, rep.Metadata.Handoff)

	// An email and a request for a person: both tools, one turn.
	both := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.LeadCapture, tool.RequestHuman}})["id"].(string)
	events = streamEvents(t, e, both, e.A.Key, `{"query":"I'm sam@example.com, please put me through to someone","conversationId":"lh-2","streaming":true}`)
	require.Len(t, ofType(events, "tool_call"), 2)
	require.Equal(t, "human_requested", statusOf(t, e, e.A, "lh-2"))
	c, ok := contactOf(t, e, e.A.Key, "sam@example.com")
	require.True(t, ok)
	require.Equal(t, []any{"lh-2"}, c["conversationIds"])

	// An agent that does not list it answers as before.
	plain := createAgent(t, e, e.A.Key, map[string]any{})["id"].(string)
	r = e.Do("POST", "/api/v2/agent/"+plain+"/chat", e.A.Key, `{"query":"Can I talk to a human?","conversationId":"lh-3"}`)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), "I have no knowledge")
	require.Equal(t, "unresolved", statusOf(t, e, e.A, "lh-3"))
}

// lead_capture and request_human act on the organization's contacts and
// people: a kit holds them only when the agent lists them (an empty list,
// which offers every other usable tool, does not), and listing them warns
// of nothing.
func TestPeopleToolsAreOptIn(t *testing.T) {
	t.Parallel()
	names := func(p tool.Profile) []string {
		var out []string
		for _, d := range tool.NewKit(&tool.Deps{}, &tool.Turn{Profile: p}).Definitions() {
			out = append(out, d.Name)
		}
		return out
	}
	require.Empty(t, names(tool.Profile{}))
	require.Equal(t, []string{tool.LeadCapture}, names(tool.Profile{Tools: []string{tool.LeadCapture}}))
	require.Equal(t, []string{tool.LeadCapture, tool.RequestHuman}, names(tool.Profile{Tools: []string{tool.RequestHuman, tool.LeadCapture}}))
	require.Empty(t, tool.Warnings(&tool.Deps{}, &tool.Profile{Tools: []string{tool.RequestHuman, tool.LeadCapture}}))
	require.True(t, (&tool.Handoff{}).Traits().EndsTurn)
	require.False(t, (&tool.Lead{}).Traits().EndsTurn)
}
