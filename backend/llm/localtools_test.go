package llm_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

// stream runs the local engine and returns its text and tool calls.
func stream(t *testing.T, req llm.Request) (string, []llm.ToolCall) {
	t.Helper()
	var text strings.Builder
	var calls []llm.ToolCall
	require.NoError(t, llm.Local{}.Stream(context.Background(), req, func(ev llm.Event) error {
		text.WriteString(ev.Text)
		if ev.ToolCall != nil {
			calls = append(calls, *ev.ToolCall)
		}
		return nil
	}))
	return text.String(), calls
}

func offering(msg string, tools ...string) llm.Request {
	req := llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: msg}}}
	for _, name := range tools {
		req.Tools = append(req.Tools, llm.Tool{Name: name})
	}
	return req
}

// The local engine calls lead_capture for a message with an email address
// or a phone number and request_human for one asking for a person, only
// when offered them; otherwise it answers as before.
func TestLocalCallsToolsWhenOffered(t *testing.T) {
	t.Parallel()
	both := []string{"datastore_query", "lead_capture", "request_human"}
	for _, c := range []struct {
		name, msg string
		tools     []string
		want      map[string]map[string]string // tool → arguments (those checked)
	}{
		{"email", "Hi, my name is Ada Lovelace, write to Ada.L@Example.com please", both,
			map[string]map[string]string{"lead_capture": {"email": "Ada.L@Example.com", "firstName": "Ada", "lastName": "Lovelace"}}},
		{"international phone", "call me on +33 6 12 34 56 78", both,
			map[string]map[string]string{"lead_capture": {"phoneNumber": "+33 6 12 34 56 78"}}},
		{"national phone", "my number is 06 12 34 56 78.", both,
			map[string]map[string]string{"lead_capture": {"phoneNumber": "06 12 34 56 78"}}},
		{"a date is not a phone", "we met on 2024-01-02 at 10:30", both, nil},
		// lead_capture refuses a national number, and with it the call's
		// email address: the address alone is recorded.
		{"email and national phone", "email anna@example.com, phone 06 12 34 56 78", both,
			map[string]map[string]string{"lead_capture": {"email": "anna@example.com", "phoneNumber": ""}}},
		{"email and international phone", "anna@example.com or +33 6 12 34 56 78", both,
			map[string]map[string]string{"lead_capture": {"email": "anna@example.com", "phoneNumber": "+33 6 12 34 56 78"}}},
		{"a word after the name is not a last name", "My name is Anna and my email is anna@example.com", both,
			map[string]map[string]string{"lead_capture": {"firstName": "Anna", "lastName": ""}}},
		{"a person", "Can I talk to a human please?", both, map[string]map[string]string{"request_human": {}}},
		{"someone", "I'd like to speak with someone from sales", both, map[string]map[string]string{"request_human": {}}},
		{"real person", "is there a real person there", both, map[string]map[string]string{"request_human": {}}},
		{"both", "a.b@c.io — connect me to an agent", both,
			map[string]map[string]string{"lead_capture": {"email": "a.b@c.io"}, "request_human": {}}},
		{"not offered", "x@y.io, talk to a human", []string{"datastore_query"}, nil},
		{"only request_human offered", "x@y.io, talk to a human", []string{"request_human"}, map[string]map[string]string{"request_human": {}}},
		{"no tools", "x@y.io", nil, nil},
		{"plain question", "What are your opening hours?", both, nil},
		{"transfer", "please transfer me to an operator", both, map[string]map[string]string{"request_human": {}}},
		{"get me a person", "get me a person now", both, map[string]map[string]string{"request_human": {}}},
		// Questions that name an agent or someone without asking for one.
		{"connect an agent", "How do I connect my agent to WhatsApp?", both, nil},
		{"someone's email", "Can I get someone's email from the dashboard?", both, nil},
		// Numbers labelled as something else are no phone numbers; an
		// unlabelled national number still is.
		{"order number", "Where is my order 0123456789?", both, nil},
		{"order number is", "My order number is 01234567, can you check it?", both, nil},
		{"invoice no.", "invoice no. 0123456789 is wrong", both, nil},
		{"ticket #", "ticket #+123456789 has no answer", both, nil},
		{"order beside a phone", "order 0123456789 is late, call me on 06 12 34 56 78", both,
			map[string]map[string]string{"lead_capture": {"phoneNumber": "06 12 34 56 78"}}},
		{"order number beside an email", "I am a@b.io, order 0123456789 is late", both,
			map[string]map[string]string{"lead_capture": {"email": "a@b.io", "phoneNumber": ""}}},
		{"a national number answered", "or 020 7946 0958", both,
			map[string]map[string]string{"lead_capture": {"phoneNumber": "020 7946 0958"}}},
		{"more digits than a phone has", "+" + strings.Repeat("1", 40), both, nil},
		// A '#' after a word naming a phone labels a phone number.
		{"phone #", "phone # 0612345678, thanks", both,
			map[string]map[string]string{"lead_capture": {"phoneNumber": "0612345678"}}},
		{"cell #", "Cell #+1 555 010 2030", both,
			map[string]map[string]string{"lead_capture": {"phoneNumber": "+1 555 010 2030"}}},
		{"tel.#", "Tel.# +33 6 12 34 56 78", both,
			map[string]map[string]string{"lead_capture": {"phoneNumber": "+33 6 12 34 56 78"}}},
	} {
		text, calls := stream(t, offering(c.msg, c.tools...))
		if c.want == nil {
			require.Empty(t, calls, c.name)
			require.NotEmpty(t, text, c.name)
			continue
		}
		require.Empty(t, text, "%s: a tool round says nothing", c.name)
		require.Len(t, calls, len(c.want), c.name)
		for _, call := range calls {
			want, ok := c.want[call.Name]
			require.True(t, ok, "%s: unexpected call %s", c.name, call.Name)
			var args map[string]string
			require.NoError(t, json.Unmarshal([]byte(call.Arguments), &args), c.name)
			for k, v := range want {
				require.Equal(t, v, args[k], "%s: %s", c.name, k)
			}
			if call.Name == "request_human" {
				require.Contains(t, args["reason"], "asked for a person", c.name)
			} else {
				require.Contains(t, args["note"], "The visitor wrote:", c.name)
			}
			require.NotEmpty(t, call.ID)
		}
	}
}

// After lead_capture ran, the engine acknowledges it (or asks again when it
// failed) and calls no tool again.
func TestLocalAnswersAfterLeadCapture(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		isError bool
		want    string
	}{{false, "I have noted your contact details"}, {true, "international format"}} {
		req := offering("my email is a@b.io", "lead_capture")
		req.Messages = append(req.Messages,
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "local_1", Name: "lead_capture", Arguments: `{"email":"a@b.io"}`}}},
			llm.Message{Role: llm.RoleTool, ToolResults: []llm.ToolResult{{CallID: "local_1", Name: "lead_capture", Content: "ok", IsError: c.isError}}})
		text, calls := stream(t, req)
		require.Empty(t, calls)
		require.Contains(t, text, c.want)
		require.NotContains(t, text, llm.NoKnowledgeAnswer)
	}
}

// A question and a passage writing an accented letter in two ways (one
// precomposed, one a letter and a combining accent) share the word.
func TestLocalMatchesAcrossUnicodeForms(t *testing.T) {
	t.Parallel()
	req := offering("\u00d6ffnungszeiten?")
	req.Knowledge = []llm.Passage{{Source: "hours", Text: "Parken ist frei. Unsere O\u0308ffnungszeiten sind 9 bis 17 Uhr."}}
	text, _ := stream(t, req)
	require.Equal(t, "Unsere O\u0308ffnungszeiten sind 9 bis 17 Uhr.", text)
}

// Chinese and Japanese, written without spaces, are answered from the
// sentence that shares the question's words, their sentences cut at their
// own full stops.
func TestLocalAnswersUnspacedScripts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ question, passage, want string }{
		{"営業時間は？", "駐車場は無料です。営業時間は9時から17時です。ペットは歓迎します。", "営業時間は9時から17時です。"},
		{"你们的营业时间是什么？", "停车免费。我们的营业时间是早上九点到下午五点。欢迎宠物。", "我们的营业时间是早上九点到下午五点。"},
	} {
		req := offering(c.question)
		req.Knowledge = []llm.Passage{{Source: "faq", Text: c.passage}}
		text, _ := stream(t, req)
		require.True(t, strings.HasPrefix(text, c.want), "%q: got %q", c.question, text)
	}
}
