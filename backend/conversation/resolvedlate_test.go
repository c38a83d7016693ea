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

// A person replies and resolves the conversation (or gives it back) while
// the model is still answering a question asked before: the model's answer,
// written without the person's reply, is not stored after it. The status is
// no longer human_requested when the answer comes, but people took the
// conversation over while the model answered, and spoke in it.
func TestModelDoesNotAnswerAfterAPersonRepliedAndResolved(t *testing.T) {
	t.Parallel()
	for _, after := range []string{"resolved", "unresolved"} {
		t.Run(after, func(t *testing.T) {
			f := setup(t)
			conv := "late-" + after
			f.chat(t, f.public, "", conv, "ada", "Hello")
			release := make(chan struct{})
			f.fake.Reply = func(int, map[string]any) testenv.FakeReply {
				select {
				case <-release:
				case <-time.After(20 * time.Second):
				}
				return testenv.FakeReply{Tokens: []string{"The", " model", " speaks", " late."}}
			}
			done := make(chan testenv.Response, 1)
			go func() {
				done <- f.Do("POST", "/api/v2/agent/"+f.public+"/chat", "", map[string]any{
					"query": "Are you there?", "conversationId": conv, "visitorId": "ada"})
			}()
			require.Eventually(t, func() bool { return len(f.fake.Requests()) == 2 }, 5*time.Second, 10*time.Millisecond)
			r := f.Do("POST", "/api/v2/conversations/"+conv+"/messages", f.A.Key, `{"text":"I am a person: done, closing this."}`)
			require.Equal(t, 201, r.Status, "%s", r.Body)
			r = f.Do("PUT", "/api/v2/conversations/"+conv, f.A.Key, `{"status":"`+after+`"}`)
			require.Equal(t, 200, r.Status, "%s", r.Body)
			close(release)
			answer := <-done
			require.Equal(t, 200, answer.Status, "%s", answer.Body)
			// The visitor reads the person's reply on the conversation's
			// events; the turn answers as when people have it.
			var reply struct {
				Answer   string
				Metadata struct{ Handoff bool }
			}
			answer.JSON(t, &reply)
			require.True(t, reply.Metadata.Handoff, "%s", answer.Body)
			require.NotContains(t, reply.Answer, "speaks late")

			var d detail
			r = f.Do("GET", "/api/v2/conversations/"+conv, f.A.Key, nil)
			require.Equal(t, 200, r.Status, "%s", r.Body)
			r.JSON(t, &d)
			require.Equal(t, after, d.Status)
			var roles []string
			for _, m := range d.Messages {
				roles = append(roles, m.Role+": "+m.Text)
			}
			require.NotContains(t, roles, "assistant: The model speaks late.", "the model answered after a person replied")
		})
	}
}

// A person replies and resolves the conversation while the model answers
// with a request for a person (request_human): the call, made without the
// reply, does not run. Run, it handed the resolved conversation back to
// people, and the model was asked again after the person's words.
func TestResolvedConversationIsNotHandedBackByALateCall(t *testing.T) {
	t.Parallel()
	f := setup(t)
	desk := f.agent(t, `{"name":"Desk","instructions":"Help.","visibility":"public","tools":["request_human"]}`)
	var took []int
	f.fake.Reply = func(_ int, body map[string]any) testenv.FakeReply {
		msgs, _ := body["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		switch {
		case last["role"] == "tool":
			return testenv.FakeReply{Tokens: []string{"The model", " speaks over the person."}}
		case strings.Contains(fmt.Sprint(last["content"]), "a person please"):
			// A person replies and closes the conversation while the
			// model answers.
			took = append(took,
				f.Do("POST", "/api/v2/conversations/closed-1/messages", f.A.Key, `{"text":"Done: your refund is on its way."}`).Status,
				f.Do("PUT", "/api/v2/conversations/closed-1", f.A.Key, `{"status":"resolved"}`).Status)
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{{ID: "rh_1", Name: "request_human", Arguments: `{"reason":"asked"}`}}}
		}
		return testenv.FakeReply{Tokens: []string{"Hello."}}
	}
	f.chat(t, desk, "", "closed-1", "ada", "Hello")
	asked := len(f.fake.Requests())

	reply := f.chat(t, desk, "", "closed-1", "ada", "I want a person please")
	require.Equal(t, []int{201, 200}, took)
	require.True(t, reply.Metadata.Handoff, "%+v", reply)
	require.Equal(t, asked+1, len(f.fake.Requests()), "the model was asked again after a person replied")

	var d detail
	r := f.Do("GET", "/api/v2/conversations/closed-1", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	r.JSON(t, &d)
	require.Equal(t, "resolved", d.Status, "the late request_human handed the resolved conversation back")
	last := d.Messages[len(d.Messages)-1]
	require.Equal(t, "human", last.Role, "%+v", d.Messages)
}
