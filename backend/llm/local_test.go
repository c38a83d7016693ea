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
