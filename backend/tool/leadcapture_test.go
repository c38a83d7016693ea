package tool_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/tool"
)

// actor plays a tool-calling model scripted by the visitor's message: a
// message "lead:{json}" calls lead_capture with those arguments, "human:
// reason" calls request_human (when offered); "say:text" says text first.
// Given tool results, it answers "Done: " and each result's status.
func actor(_ int, body map[string]any) testenv.FakeReply {
	r := req(body)
	last := r.last()
	if last["role"] == "tool" {
		var out []string
		for _, m := range r.messages() {
			if m["role"] == "tool" {
				c, _ := m["content"].(string)
				out = append(out, strings.SplitN(c, "\n", 2)[0])
			}
		}
		return testenv.FakeReply{Tokens: []string{"Done: ", strings.Join(out, " | ")}}
	}
	msg, _ := last["content"].(string)
	var reply testenv.FakeReply
	if say, rest, ok := strings.Cut(msg, "|"); ok && strings.HasPrefix(say, "say:") {
		reply.Tokens, msg = []string{strings.TrimPrefix(say, "say:")}, rest
	}
	offered := strings.Join(r.offered(), ",")
	switch {
	case strings.HasPrefix(msg, "lead:") && strings.Contains(offered, tool.LeadCapture):
		reply.ToolCalls = []llm.ToolCall{{ID: "lc_1", Name: tool.LeadCapture, Arguments: strings.TrimPrefix(msg, "lead:")}}
	case strings.HasPrefix(msg, "human:") && strings.Contains(offered, tool.RequestHuman):
		reply.ToolCalls = []llm.ToolCall{{ID: "rh_1", Name: tool.RequestHuman, Arguments: strings.TrimPrefix(msg, "human:")}}
	case len(reply.Tokens) == 0:
		reply.Tokens = []string{"Offered: [" + offered + "]"}
	}
	return reply
}

// contactOf is the contact of email in the key's organization, with its
// conversations; found is false when there is none.
func contactOf(t *testing.T, e *testenv.Env, key, email string) (c map[string]any, found bool) {
	t.Helper()
	r := e.Do("GET", "/api/contacts?email="+url.QueryEscape(email), key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var page struct{ Contacts []map[string]any }
	r.JSON(t, &page)
	if len(page.Contacts) == 0 {
		return nil, false
	}
	r = e.Do("GET", "/api/contacts/"+page.Contacts[0]["id"].(string), key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &c)
	return c, true
}

// lead_capture against a scripted model: valid details are merged into the
// organization's contacts and linked to the conversation; bad ones are an
// error result the model reads (the turn goes on), and nothing is stored.
func TestLeadCapture(t *testing.T) {
	t.Parallel()
	fp := testenv.NewFakeProvider(t)
	fp.Reply = actor
	e := testenv.New(t, testenv.WithFakeModels(fp))
	id := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.LeadCapture}})["id"].(string)

	events := streamEvents(t, e, id, e.A.Key, `{"query":"lead:{\"email\":\"Ada@Example.com\",\"phoneNumber\":\"+33 6 12 34 56 78\",\"firstName\":\"Ada\",\"lastName\":\"Lovelace\",\"note\":\"Wants a quote for 20 seats.\"}","conversationId":"lead-1","streaming":true}`)
	calls := ofType(events, "tool_call")
	require.Len(t, calls, 1)
	require.Equal(t, tool.LeadCapture, calls[0]["name"])
	require.Equal(t, "ok", calls[0]["status"], calls[0]["result"])
	require.Equal(t, "contact recorded: email ada@example.com, phone number +33612345678, name Ada Lovelace, a note", calls[0]["result"])
	require.Len(t, ofType(events, "done"), 1)

	reqs := fp.Requests()
	require.Len(t, reqs, 2)
	require.Equal(t, []string{tool.LeadCapture}, req(reqs[0]).offered())
	fn := req(reqs[0]).function(t, tool.LeadCapture)
	require.Contains(t, fn["parameters"].(map[string]any)["properties"], "phoneNumber")
	result := req(reqs[1]).toolResult("lc_1")
	require.True(t, strings.HasPrefix(result, `<tool_output tool="lead_capture" status="ok"`), result)
	require.Contains(t, result, "Do not ask for these details again.")

	c, ok := contactOf(t, e, e.A.Key, "ada@example.com")
	require.True(t, ok)
	require.Equal(t, "+33612345678", c["phoneNumber"])
	require.Equal(t, "Ada", c["firstName"])
	require.Equal(t, "Lovelace", c["lastName"])
	require.Equal(t, "Wants a quote for 20 seats.", c["notes"])
	require.Equal(t, []any{"lead-1"}, c["conversationIds"], "linked to the conversation")

	// A later call in the conversation adds to the same contact.
	r := e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"lead:{\"phoneNumber\":\"+442079460958\",\"note\":\"Prefers calls.\"}","conversationId":"lead-1"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var rep struct{ Answer string }
	r.JSON(t, &rep)
	require.True(t, strings.HasPrefix(rep.Answer, `Done: <tool_output tool="lead_capture" status="ok"`), rep.Answer)
	// The model passes the visitor's word: a number other than the stored
	// one is noted for a person to apply, not applied (anyone can type
	// someone else's email, in this conversation or another).
	c, _ = contactOf(t, e, e.A.Key, "ada@example.com")
	require.Equal(t, "+33612345678", c["phoneNumber"])
	require.Equal(t, "Wants a quote for 20 seats.\nPrefers calls.\n"+
		"Also said, not applied (the contact holds its own): phone number +442079460958.", c["notes"])

	// SECURITY: someone else giving Ada's email in another conversation
	// joins her contact but changes nothing it holds; what differs is
	// noted.
	for _, args := range []string{`{\"email\":\"ada@example.com\",\"firstName\":\"Mallory\"}`, `{\"phoneNumber\":\"+15005550006\"}`} {
		r = e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"lead:`+args+`","conversationId":"lead-2"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	c, _ = contactOf(t, e, e.A.Key, "ada@example.com")
	require.Equal(t, "+33612345678", c["phoneNumber"])
	require.Equal(t, "Ada", c["firstName"])
	require.Contains(t, c["notes"], "first name Mallory")
	require.Contains(t, c["notes"], "phone number +15005550006")

	// Bad details: an error result naming the field, a completed turn,
	// nothing stored.
	for i, bad := range []struct{ args, want string }{
		{`{"email":"ada at example.com"}`, "nothing was recorded: email: "},
		{`{"phoneNumber":"06 12 34 56 78","email":"bob@example.com"}`, "nothing was recorded: phoneNumber: must be in international (E.164) format"},
		{`{"firstName":"Bob"}`, "nothing was recorded: email: an email or a phoneNumber is needed"},
		{`{"email":["bob@example.com"]}`, "the arguments must be a JSON object of strings"},
		{`not json`, "the arguments must be a JSON object of strings"},
		// JSON's \u0000 is a NUL, which Postgres refuses in text (the turn
		// failed with a 500 once).
		{`{"email":"bob@example.com","note":"call\u0000me"}`, "nothing was recorded: note: must be UTF-8 text without NUL characters"},
		{`{"email":"bob@example.com","firstName":"\u0000"}`, "nothing was recorded: firstName: must be UTF-8 text without NUL characters"},
		{`{"email":"bob@example.com\u0000"}`, "nothing was recorded: email: must be UTF-8 text without NUL characters"},
	} {
		escaped := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(bad.args)
		body := `{"query":"lead:` + escaped + `","conversationId":"bad-` + string(rune('a'+i)) + `","streaming":true}`
		events := streamEvents(t, e, id, e.A.Key, body)
		calls := ofType(events, "tool_call")
		require.Len(t, calls, 1, bad.args)
		require.Equal(t, "error", calls[0]["status"], bad.args)
		require.Contains(t, calls[0]["result"], bad.want, bad.args)
		require.Len(t, ofType(events, "done"), 1, "the turn completes: %s", bad.args)
		require.Contains(t, req(fp.Requests()[len(fp.Requests())-1]).toolResult("lc_1"), `status="error"`)
	}
	_, ok = contactOf(t, e, e.A.Key, "bob@example.com")
	require.False(t, ok, "nothing stored from bad details")

	// SECURITY: the contact is A's alone.
	_, ok = contactOf(t, e, e.B.Key, "ada@example.com")
	require.False(t, ok)

	// lead_capture acts on the organization's data: an agent that does not
	// list it (even with an empty list) is not offered it.
	other := createAgent(t, e, e.A.Key, map[string]any{})["id"].(string)
	r = e.Do("POST", "/api/v2/agent/"+other+"/chat", e.A.Key, `{"query":"lead:{\"email\":\"eve@example.com\"}","conversationId":"nolist"}`)
	require.Equal(t, http.StatusOK, r.Status)
	_, ok = contactOf(t, e, e.A.Key, "eve@example.com")
	require.False(t, ok)
	require.NotContains(t, strings.Join(req(fp.Requests()[len(fp.Requests())-1]).offered(), ","), tool.LeadCapture)
}

// With no provider keys, the offline engine captures the details a visitor
// writes, acknowledges them, and adds to them later in the conversation.
func TestLeadCaptureLocalEngine(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	id := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.LeadCapture, tool.RequestHuman}})["id"].(string)

	events := streamEvents(t, e, id, e.A.Key, `{"query":"Hello, my name is Ada Lovelace; write to ada@example.com","conversationId":"local-1","streaming":true}`)
	calls := ofType(events, "tool_call")
	require.Len(t, calls, 1)
	require.Equal(t, tool.LeadCapture, calls[0]["name"])
	require.Equal(t, "ok", calls[0]["status"], calls[0]["result"])
	var answer strings.Builder
	for _, ev := range ofType(events, "token") {
		answer.WriteString(ev["value"].(string))
	}
	require.Contains(t, answer.String(), "I have noted your contact details")
	c, ok := contactOf(t, e, e.A.Key, "ada@example.com")
	require.True(t, ok)
	require.Equal(t, "Ada", c["firstName"])
	require.Equal(t, "Lovelace", c["lastName"])
	require.Contains(t, c["notes"], "The visitor wrote: Hello, my name is Ada Lovelace")
	require.Equal(t, []any{"local-1"}, c["conversationIds"])

	// A number later: the same contact. A national number: asked again.
	r := e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"You can also call me on +44 20 7946 0958","conversationId":"local-1"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "I have noted your contact details")
	c, _ = contactOf(t, e, e.A.Key, "ada@example.com")
	require.Equal(t, "+442079460958", c["phoneNumber"])
	r = e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"or 020 7946 0958","conversationId":"local-1"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), "international format")

	// A question without details calls nothing.
	events = streamEvents(t, e, id, e.A.Key, `{"query":"What are your opening hours?","conversationId":"local-2","streaming":true}`)
	require.Empty(t, ofType(events, "tool_call"))
	require.Contains(t, tokens(events), "I have no knowledge")

	// Status of the conversation is untouched by lead_capture.
	var status string
	require.NoError(t, e.App.Store.Tenant(context.Background(), e.A.ID, func(q *dbq.Queries) error {
		conv, err := q.GetConversation(context.Background(), dbq.GetConversationParams{OrgID: e.A.ID, ID: "local-1"})
		status = conv.Status
		return err
	}))
	require.Equal(t, "unresolved", status)
}
