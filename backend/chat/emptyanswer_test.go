package chat_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
)

// An answer stored without text (the model finished with none: a content
// filter, a safety block; or the stream failed before its first token after
// sources went out) is not given back to the model as an empty message:
// Anthropic refuses an empty text block ("text content blocks must be
// non-empty") and Gemini an empty part, so every later turn of the
// conversation failed with 502.
func TestEmptyAnswerIsLeftOutOfTheHistory(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.fake.Reply = func(call int, _ map[string]any) testenv.FakeReply {
		if call == 1 {
			return testenv.FakeReply{Tokens: []string{}} // finish_reason stop, no text
		}
		if call == 2 {
			return testenv.FakeReply{Tokens: []string{"  \n"}}
		}
		return testenv.FakeReply{Tokens: []string{"Fine."}}
	}
	for _, q := range []string{"First", "Second", "Third"} {
		status, _, raw := f.chat(t, f.private, f.A.Key, fmt.Sprintf(`{"query":%q,"conversationId":"empty-1"}`, q))
		require.Equal(t, 200, status, "%s", raw.Body)
	}
	content, _ := lastAnswer(t, f, "empty-1")
	require.Equal(t, "Fine.", content)
	for _, m := range promptOf(t, f.fake, 2) {
		c, _ := m["content"].(string)
		require.NotEmpty(t, strings.TrimSpace(c), "a blank %s message reached the model: %v", m["role"], promptOf(t, f.fake, 2))
	}
}
