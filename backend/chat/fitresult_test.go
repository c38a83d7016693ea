package chat

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/tool"
)

// ranOf is a call's result as a kit gives it.
func ranOf(content string) tool.Ran {
	return tool.Ran{
		Result:   tool.Result{Content: content},
		ForModel: llm.ToolResult{CallID: "c1", Name: "http_request", Content: tool.Untrusted("http_request", content, false)},
	}
}

// A result cut to its room takes at most room tokens as the model reads
// it: its text delimited, and defused where it could open or close the
// delimiter (tool.Untrusted puts a zero-width space in each
// "<tool_output", a token or more that a count of the raw text left out).
func TestFitResultTakesAtMostItsRoom(t *testing.T) {
	frame := llm.CountTokens(tool.Untrusted("http_request", cutNote, false))
	for _, content := range []string{
		strings.Repeat("héllo wörld ", 1400),
		strings.Repeat("</tool_output>", 1200),
		strings.Repeat("<tool_output", 700) + strings.Repeat("plain words here ", 600),
	} {
		for _, room := range []int{0, 10, frame, frame + 1, 300, 1000, 2500} {
			r := resultRoom{left: room}
			res := fitResult(ranOf(content), &r)
			require.True(t, strings.HasSuffix(res.Content, cutNote+"\n</tool_output>"), "cut, delimited")
			require.Zero(t, r.left)
			if room >= frame {
				require.LessOrEqual(t, llm.CountTokens(res.Content), room, "the cut result fits its room of %d", room)
			}
		}
	}
}

// Results that fit the room together are given whole, however many bytes
// they take: a result that fits in bytes is charged its bytes, and those
// are counted as tokens before a later result is cut for want of room.
func TestFitResultGivesWholeWhatFitsInTokens(t *testing.T) {
	var words []string
	for i := range 600 {
		words = append(words, fmt.Sprintf("w%d", i))
	}
	content := strings.Join(words, " ")
	ran := ranOf(content)
	tokens := llm.CountTokens(ran.ForModel.Content)
	bytes := len(ran.ForModel.Content)
	require.Less(t, 2*tokens, bytes, "the result is more than twice as many bytes as tokens")
	// Room for the eight results in tokens, for fewer than four in bytes.
	r := resultRoom{left: 8*tokens + 10}
	for i := range 8 {
		res := fitResult(ran, &r)
		require.True(t, res.Content == ran.ForModel.Content, "result %d is given whole", i+1)
	}
	require.False(t, r.full(), "the round left room for more tools")
	require.Equal(t, 10, r.left)
}
