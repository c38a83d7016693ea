package llm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

// The offline engine answers with whole sentences: a '.' inside a price, a
// version, a host name or an email address does not end one (it told a
// visitor the plan cost "$19." and the docs lived at "docs.").
func TestLocalKeepsDotsWithinWords(t *testing.T) {
	knowledge := []llm.Passage{{
		Source: "Pricing", Text: "The Pro plan costs $19.99 per month and includes 3.5 GB of storage. " +
			"Docs live at docs.example.com for all customers. Write to support@example.com " +
			"or call us.\nWe answer within a day. \"Refunds take 5 days.\" Say hi!",
	}}
	for question, want := range map[string]string{
		"How much does the Pro plan cost?": "The Pro plan costs $19.99 per month and includes 3.5 GB of storage.",
		"Where do the docs live?":          "Docs live at docs.example.com for all customers.",
		"Whom do I write to for support?":  "Write to support@example.com or call us.",
		"How long do refunds take?":        `"Refunds take 5 days."`,
	} {
		req := offering(question)
		req.Knowledge = knowledge
		answer, _ := stream(t, req)
		require.Equal(t, want, answer, question)
	}
}

// Chinese text written with ASCII marks and no spaces still cuts into
// sentences.
func TestLocalCutsUnspacedSentences(t *testing.T) {
	req := offering("营业时间")
	req.Knowledge = []llm.Passage{{Source: "FAQ", Text: "营业时间是上午九点到下午五点.价格是19.99元.请联系我们!"}}
	answer, _ := stream(t, req)
	require.Equal(t, "营业时间是上午九点到下午五点.", answer)
}

// A message with no letter or digit asks nothing: it is not answered with
// the passage nearest its embedding (an emoji was answered with a Japanese
// shipping passage), while a question in other words still is.
func TestLocalAnswersNoWordlessMessage(t *testing.T) {
	knowledge := []llm.Passage{{Source: "FAQ", Text: "The shop opens at nine. It closes at six.", Similarity: 0.5}}
	for _, q := range []string{"😀😀😀", "👍\ufe0f", "🇫🇷", "\u200b\u200b", "?!"} {
		req := offering(q)
		req.Knowledge = knowledge
		answer, _ := stream(t, req)
		require.Equal(t, llm.NoKnowledgeAnswer, answer, "%q", q)
	}
	req := offering("When can I come by?")
	req.Knowledge = knowledge
	answer, _ := stream(t, req)
	require.Equal(t, "The shop opens at nine. It closes at six.", answer)
}

// A line that introduces a list is answered with the list, its items on
// lines of their own; an abbreviation's '.' ends no sentence.
func TestLocalKeepsListsAndAbbreviations(t *testing.T) {
	knowledge := []llm.Passage{{Source: "FAQ", Text: "Shipping options:\n- Standard: 5-7 days, free over $50.\n" +
		"- Express: 1-2 days, $15.\n- Overnight: e.g. next day, $30.\nReturns are free.\nAsk Mr. Smith at the desk about returns.\n" +
		"To reset your password:\n1. Open the app.\n2. Tap Settings, then Reset."}}
	list := "Shipping options:\n- Standard: 5-7 days, free over $50.\n- Express: 1-2 days, $15.\n- Overnight: e.g. next day, $30."
	for question, want := range map[string]string{
		"What shipping options do you have?":   list,
		"How long does express shipping take?": list,
		// The item first, then the line introducing its list: the item is
		// not given twice.
		"Is overnight shipping next day?": "- Overnight: e.g. next day, $30.\nShipping options:\n- Standard: 5-7 days, free over $50.\n- Express: 1-2 days, $15.",
		"Whom do I ask at the desk?":      "Ask Mr. Smith at the desk about returns.",
		"How do I reset my password?":     "To reset your password:\n1. Open the app.\n2. Tap Settings, then Reset.",
	} {
		req := offering(question)
		req.Knowledge = knowledge
		answer, _ := stream(t, req)
		require.Equal(t, want, answer, question)
	}
}

// Chinese and Japanese sentences are joined as written, with no space.
func TestLocalJoinsUnspacedSentences(t *testing.T) {
	req := offering("配送の送料")
	req.Knowledge = []llm.Passage{{Source: "FAQ", Text: "配送は通常3〜5営業日かかります。送料は全国一律500円です。"}}
	answer, _ := stream(t, req)
	require.Equal(t, "配送は通常3〜5営業日かかります。送料は全国一律500円です。", answer)
	// A line with no full stop (a heading) is not run into the next.
	req = offering("送料の配送")
	req.Knowledge = []llm.Passage{{Source: "FAQ", Text: "配送料金\n全国一律500円で配送します。"}}
	answer, _ = stream(t, req)
	require.Equal(t, "配送料金 全国一律500円で配送します。", answer)
}

// After lead_capture, the visitor's own address is no question: its words
// ("example", "com") do not answer with the passage giving the shop's.
func TestLocalAcknowledgesLeadWithoutEchoingAddresses(t *testing.T) {
	knowledge := []llm.Passage{{Source: "FAQ", Text: "Email support@example.com or call +1 555 010 2030. The shop hours are 9 to 5.", Similarity: 0.4}}
	const ack = "Thank you, I have noted your contact details; the team will get back to you."
	for msg, want := range map[string]string{
		"I am Ada, write to ada@example.com or +44 20 7946 0958": ack,
		"ada@example.com — what are the shop hours?":             ack + " The shop hours are 9 to 5.",
	} {
		req := offering(msg, "lead_capture")
		req.Knowledge = knowledge
		req.Messages = append(req.Messages,
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "local_1", Name: "lead_capture", Arguments: `{}`}}},
			llm.Message{Role: llm.RoleTool, ToolResults: []llm.ToolResult{{CallID: "local_1", Name: "lead_capture", Content: "ok"}}})
		answer, _ := stream(t, req)
		require.Equal(t, want, answer, msg)
	}
}
