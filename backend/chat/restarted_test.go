package chat_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/tool"
)

// A conversation deleted while the model answers, and started again under
// the same id by another visitor, is not the turn's: the first visitor's
// answer is not stored in (nor streamed to) the new one; its turn ends as
// one whose conversation was deleted (404).
func TestAnswerDoesNotLandInARestartedConversation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 1 {
			once.Do(func() { close(entered) })
			<-release
			return testenv.FakeReply{Tokens: []string{"Ada's secret answer"}}
		}
		return testenv.FakeReply{Tokens: []string{"Hello Bob."}}
	}
	body := func(visitor, q string) string {
		b, err := json.Marshal(map[string]string{"query": q, "conversationId": "reused", "visitorId": visitor})
		require.NoError(t, err)
		return string(b)
	}
	done := make(chan testenv.Response, 1)
	go func() {
		_, _, r := f.chat(t, f.public, "", body("ada", "Ada's question"))
		done <- r
	}()
	<-entered
	r := f.Do("DELETE", "/api/v2/conversations/reused", f.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	status, rep, raw := f.chat(t, f.public, "", body("bob", "Bob's question"))
	require.Equal(t, http.StatusOK, status, "%s", raw.Body)
	require.Equal(t, "reused", rep.ConversationID, "Bob starts a conversation under the freed id")
	close(release)
	r = <-done

	msgs := messagesOf(t, f, "reused")
	for _, m := range msgs {
		require.NotContains(t, m.Content, "Ada", "Ada's turn landed in Bob's conversation: %+v", msgs)
	}
	require.Len(t, msgs, 2, "Bob's question and answer: %+v", msgs)
	require.True(t, strings.HasPrefix(msgs[1].Content, "Hello Bob"), "%+v", msgs)
	require.Equal(t, http.StatusNotFound, r.Status, "%s", r.Body)
}

// The tools of a turn whose conversation was deleted and started again
// under its id by another visitor leave the new one alone: request_human
// does not hand it over, lead_capture neither links it nor merges into its
// contact.
func TestToolsLeaveARestartedConversationAlone(t *testing.T) {
	t.Parallel()
	f := setup(t)
	agent := f.agent(t, `{"name":"Tools","instructions":"Help.","visibility":"public","tools":["`+tool.RequestHuman+`","`+tool.LeadCapture+`"]}`)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 1 {
			once.Do(func() { close(entered) })
			<-release
			return testenv.FakeReply{ToolCalls: []llm.ToolCall{
				{ID: "lc_1", Name: tool.LeadCapture, Arguments: `{"email":"ada@example.com","firstName":"Ada"}`},
				{ID: "rh_1", Name: tool.RequestHuman, Arguments: `{"reason":"Ada asked"}`},
			}}
		}
		return testenv.FakeReply{Tokens: []string{"Hello Bob."}}
	}
	done := make(chan testenv.Response, 1)
	go func() {
		_, _, r := f.chat(t, agent, "", `{"query":"I am ada@example.com, a person please","conversationId":"reused","visitorId":"ada"}`)
		done <- r
	}()
	<-entered
	r := f.Do("DELETE", "/api/v2/conversations/reused", f.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	status, _, raw := f.chat(t, agent, "", `{"query":"hi","conversationId":"reused","visitorId":"bob","contact":{"phoneNumber":"+14155550100"}}`)
	require.Equal(t, http.StatusOK, status, "%s", raw.Body)
	close(release)
	r = <-done
	require.NotEqual(t, http.StatusOK, r.Status, "%s", r.Body)

	tx := asA(t, f)
	var convStatus, phone string
	var email *string
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT c.status, k.email, coalesce(k.phone_number, '') FROM conversations c
		JOIN contacts k ON k.org_id = c.org_id AND k.id = c.contact_id WHERE c.id = 'reused'`).Scan(&convStatus, &email, &phone))
	require.Equal(t, "unresolved", convStatus, "Ada's request_human handed Bob's conversation over")
	require.Equal(t, "+14155550100", phone, "Bob's conversation is no longer linked to Bob's contact")
	require.Nil(t, email, "Ada's email was merged into Bob's contact")
	for _, m := range messagesOf(t, f, "reused") {
		require.NotContains(t, m.Content, "Ada", "Ada's turn landed in Bob's conversation")
	}
}
