package conversation_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/testenv"
)

// A visitor's stream of a conversation that is deleted and then made again
// under the same id (ids are the clients' own) by another visitor sends
// none of the new conversation's events: it ends, NotFound. It read events
// by id, and sent the other visitor's messages until its next heartbeat.
func TestStreamEndsWhenItsConversationIsMadeAgain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.chat(t, f.public, "", "shared", "ada", "Ada's words")
	ada := follow(t, f.URL, "/api/v2/conversations/shared/events"+visitorQuery(f.public, "ada"), nil)
	r := f.Do("DELETE", "/api/v2/conversations/shared", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	// Eve's conversation reaches past Ada's last event number (2).
	f.chat(t, f.public, "", "shared", "eve", "Eve's first words")
	f.chat(t, f.public, "", "shared", "eve", "Eve's private words")
	var last *streamEvent
	for {
		_, ev := ada.nextOrEnd(t)
		if ev == nil {
			break
		}
		require.NotEqual(t, "message", ev.Type, "Ada's stream sent a message of Eve's conversation: %+v", ev.Message)
		last = ev
	}
	require.NotNil(t, last)
	require.Equal(t, "error", last.Type)
	require.Equal(t, "NOT_FOUND", last.Error.Code)
}

// A visitor names its public agent by its id in any form the agent's
// other paths accept (upper case, say): its listing was refused as
// another agent's (404) while its chat and reads were answered.
func TestVisitorListingTakesTheAgentIdAsChatDoes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	upper := strings.ToUpper(f.public)
	f.chat(t, upper, "", "ada-1", "ada", "Hello")
	for _, path := range []string{
		"/api/v2/agent/" + upper + "/conversations?visitorId=ada",
		"/api/v2/conversations" + visitorQuery(upper, "ada"),
	} {
		r := f.Do("GET", path, "", nil)
		require.Equal(t, 200, r.Status, "%s: %s", path, r.Body)
		var l listing
		r.JSON(t, &l)
		require.Equal(t, []string{"ada-1"}, ids(l), path)
	}
}

// An answer the model was still generating when a person took the
// conversation over is not stored after the person's reply: people have
// the conversation, and the model is silent in it (backend/handoff).
func TestModelDoesNotAnswerAfterAPersonTookOver(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.chat(t, f.public, "", "race-1", "ada", "Hello")
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply {
		return testenv.FakeReply{Tokens: []string{"The", " model", " speaks", " late."}, Delay: 200 * time.Millisecond}
	}
	done := make(chan testenv.Response, 1)
	go func() {
		done <- f.Do("POST", "/api/v2/agent/"+f.public+"/chat", "", map[string]any{
			"query": "Are you there?", "conversationId": "race-1", "visitorId": "ada"})
	}()
	require.Eventually(t, func() bool { return len(f.fake.Requests()) == 2 }, 5*time.Second, 10*time.Millisecond)
	r := f.Do("POST", "/api/v2/conversations/race-1/messages", f.A.Key, `{"text":"I am a person; I take it from here."}`)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	// The visitor hears the handoff message, as on any turn while people
	// have the conversation, with what the model's answer cost.
	answer := <-done
	require.Equal(t, 200, answer.Status, "%s", answer.Body)
	var reply struct {
		Answer   string
		Metadata struct{ Handoff bool }
		Usage    struct{ CompletionTokens int64 }
	}
	answer.JSON(t, &reply)
	require.True(t, reply.Metadata.Handoff, "%s", answer.Body)
	require.NotContains(t, reply.Answer, "speaks late")
	require.Positive(t, reply.Usage.CompletionTokens)

	var d detail
	r = f.Do("GET", "/api/v2/conversations/race-1", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &d)
	require.Equal(t, "human_requested", d.Status)
	took := -1
	for i, m := range d.Messages {
		if m.Role == "human" {
			took = i
		}
	}
	require.GreaterOrEqual(t, took, 0)
	for _, m := range d.Messages[took+1:] {
		require.NotEqual(t, "The model speaks late.", m.Text, "the model answered after a person took the conversation over")
	}
}

// Two turns of one conversation at once: turn A's model hands the
// conversation to people (request_human), then a person replies, while turn
// B's model is still answering a question asked before the handoff. B's
// answer is not stored: the model was silenced by A's handoff, and the
// answer would show (in the transcript, the inbox and the visitor's event
// stream) after the handoff message and after the person's reply, as if the
// model were still answering over people. B's visitor hears the handoff
// message, as on any turn while people have the conversation. (Only the
// turn that handed the conversation over keeps its own answer.)
func TestOtherTurnDoesNotAnswerAfterTheModelHandedOver(t *testing.T) {
	t.Parallel()
	f := setup(t)
	desk := f.agent(t, `{"name":"Desk","instructions":"Help.","visibility":"public","tools":["request_human"]}`)
	release := make(chan struct{})
	f.fake.Reply = func(_ int, body map[string]any) testenv.FakeReply {
		msgs, _ := body["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		switch q := fmt.Sprint(last["content"]); {
		case strings.Contains(q, "a person please"):
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "rh_1", Name: "request_human", Arguments: `{"reason":"asked"}`}}}
		case strings.Contains(q, "slow question"):
			select { // B's model answers once A handed over and a person replied
			case <-release:
			case <-time.After(20 * time.Second):
			}
			return testenv.FakeReply{Tokens: []string{"The", " model", " speaks", " late."}}
		}
		return testenv.FakeReply{Tokens: []string{"Hello."}}
	}
	f.chat(t, desk, "", "two-1", "ada", "Hello")
	done := make(chan testenv.Response, 1)
	go func() {
		done <- f.Do("POST", "/api/v2/agent/"+desk+"/chat", "", map[string]any{
			"query": "A slow question", "conversationId": "two-1", "visitorId": "ada"})
	}()
	require.Eventually(t, func() bool { return len(f.fake.Requests()) == 2 }, 10*time.Second, 10*time.Millisecond)

	a := f.chat(t, desk, "", "two-1", "ada", "a person please")
	require.Equal(t, "A person will answer here shortly.", a.Answer, "turn A hands over")
	r := f.Do("POST", "/api/v2/conversations/two-1/messages", f.A.Key, `{"text":"I am a person; I take it from here."}`)
	require.Equal(t, 201, r.Status, "%s", r.Body)
	close(release)

	b := <-done
	require.Equal(t, 200, b.Status, "%s", b.Body)
	var reply chatReply
	b.JSON(t, &reply)
	require.True(t, reply.Metadata.Handoff, "turn B's visitor hears the handoff message: %s", b.Body)
	require.NotContains(t, reply.Answer, "speaks late")

	var d detail
	r = f.Do("GET", "/api/v2/conversations/two-1", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &d)
	require.Equal(t, "human_requested", d.Status)
	var texts []string
	for _, m := range d.Messages {
		texts = append(texts, m.Role+": "+m.Text)
	}
	require.Contains(t, texts, "assistant: A person will answer here shortly.", "turn A's own answer is stored: %q", texts)
	require.NotContains(t, texts, "assistant: The model speaks late.", "the model answered after it handed the conversation over")
	require.Equal(t, "human: I am a person; I take it from here.", texts[len(texts)-1], "%q", texts)
}

// A person takes a conversation over while the model is answering, and
// the model's reply calls a tool: the turn stops there. The tool does not
// run in the conversation people now have (a contact recorded after the
// person's reply), and the model is not asked again: its next round's
// tokens would reach the visitor after the person's reply, at people's
// cost. The visitor hears the handoff message, as on any turn while
// people have the conversation.
func TestTurnStopsBetweenRoundsWhenAPersonTookOver(t *testing.T) {
	t.Parallel()
	f := setup(t)
	desk := f.agent(t, `{"name":"Desk","instructions":"Help.","visibility":"public","tools":["lead_capture"]}`)
	took := make(chan int, 1)
	f.fake.Reply = func(_ int, body map[string]any) testenv.FakeReply {
		msgs, _ := body["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		switch {
		case last["role"] == "tool":
			return testenv.FakeReply{Tokens: []string{"The model", " speaks over the person."}}
		case strings.Contains(fmt.Sprint(last["content"]), "call me back"):
			// The person's reply lands while the model answers.
			took <- f.Do("POST", "/api/v2/conversations/rounds-1/messages", f.A.Key, `{"text":"I am a person; I take it from here."}`).Status
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "lc_1", Name: "lead_capture", Arguments: `{"email":"ada@example.com"}`}}}
		}
		return testenv.FakeReply{Tokens: []string{"Hello."}}
	}
	f.chat(t, desk, "", "rounds-1", "ada", "Hello")
	asked := len(f.fake.Requests())

	reply := f.chat(t, desk, "", "rounds-1", "ada", "Please call me back")
	require.Equal(t, 201, <-took)
	require.True(t, reply.Metadata.Handoff, "%+v", reply)
	require.Equal(t, "A person will answer here shortly.", reply.Answer)
	require.Equal(t, asked+1, len(f.fake.Requests()), "the model was asked again after a person took the conversation over")

	r := f.Do("GET", "/api/contacts", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var contacts struct{ Contacts []map[string]any }
	r.JSON(t, &contacts)
	require.Empty(t, contacts.Contacts, "lead_capture ran after a person took the conversation over")

	var d detail
	r = f.Do("GET", "/api/v2/conversations/rounds-1", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &d)
	require.Equal(t, "human_requested", d.Status)
	last := d.Messages[len(d.Messages)-1]
	require.Equal(t, "human", last.Role, "%+v", d.Messages)
}
