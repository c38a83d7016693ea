package chat

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/llm"
)

// Every provider is now asked for up to llm.MaxOutputTokens: a prompt must
// leave them room in the window, the retrieved passages counted (they are
// in the prompt as sent), or a server that checks prompt + bound against
// its window (OpenAI, vLLM) refuses every turn of a long conversation.
func TestPromptLeavesTheAnswerItsRoom(t *testing.T) {
	t.Parallel()
	const window = 8000
	found := vaultPassages(5)
	var history []dbq.ListMessagesRow // newest first
	for i := range 200 {
		role := "user"
		if i%2 == 0 {
			role = "assistant"
		}
		history = append(history, dbq.ListMessagesRow{Role: role, Content: strings.Repeat("words of a long conversation ", 20)})
	}
	tn := &turn{
		a:       &Admitted{Agent: dbq.Agent{Instructions: "Answer from the documents."}},
		req:     &parleyv1.ChatRequest{Query: "Who opens the vault?"},
		route:   llm.Route{Name: "small", ContextTokens: window, NoTools: true},
		history: history,
		found:   found,
	}
	_, req := (&Service{}).buildPrompt(tn)
	require.Greater(t, len(req.Messages), 1, "some history fits")
	got := llm.PromptTokens(req)
	require.LessOrEqual(t, got+llm.MaxOutputTokens, window,
		"the prompt (%d tokens, passages included) and the answer's %d fit in the window", got, llm.MaxOutputTokens)
}

// The prompt alone (the question, the system prompt and the retrieved
// passages, before any history) may leave less than llm.MaxOutputTokens
// of a small window: the first call then asks for what the window leaves,
// as a call after a tool round does (Route.AnswerRoom), not prompt +
// MaxOutputTokens past the window, which OpenAI and vLLM refuse.
func TestFirstCallLeavesTheAnswerWhatTheWindowLeaves(t *testing.T) {
	t.Parallel()
	const window = 8000
	found := vaultPassages(10)
	tn := &turn{
		a:     &Admitted{Agent: dbq.Agent{Instructions: "Answer from the documents."}},
		req:   &parleyv1.ChatRequest{Query: "Who opens the vault?"},
		route: llm.Route{Name: "small", ContextTokens: window, NoTools: true},
		found: found,
	}
	_, req := (&Service{}).buildPrompt(tn)
	got := llm.PromptTokens(req)
	require.Greater(t, got+llm.MaxOutputTokens, window, "the test's prompt leaves less than MaxOutputTokens")
	require.Less(t, got, window)
	require.LessOrEqual(t, got+req.OutputBound(), window,
		"the prompt (%d tokens) and the answer's bound (%d) fit in the window", got, req.OutputBound())

	// A prompt that leaves MaxOutputTokens gets them all.
	tn.found = found[:1]
	_, req = (&Service{}).buildPrompt(tn)
	require.Equal(t, llm.MaxOutputTokens, req.OutputBound())
}

// vaultPassages are n retrieved passages of some 600 tokens each.
func vaultPassages(n int) []knowledge.Result {
	passage := strings.Repeat("The vault is opened by the manager on duty. ", 60)
	found := make([]knowledge.Result, n)
	for i := range found {
		found[i] = knowledge.Result{DatasourceName: "docs", Title: "Vault", Text: passage}
	}
	return found
}

// A message's images take room in the window (llm.ImageTokens each): the
// history that fits beside them is shorter, and the prompt they are in
// leaves the answer its room. Uncounted, ten images (some 16,000 tokens)
// came on top of a history that filled the window.
func TestPromptCountsTheImages(t *testing.T) {
	t.Parallel()
	const window = 16000
	var history []dbq.ListMessagesRow // newest first
	for i := range 200 {
		role := "user"
		if i%2 == 0 {
			role = "assistant"
		}
		history = append(history, dbq.ListMessagesRow{Role: role, Content: strings.Repeat("words of a long conversation ", 20)})
	}
	tn := &turn{
		a:       &Admitted{Agent: dbq.Agent{Instructions: "Describe what you are shown."}},
		req:     &parleyv1.ChatRequest{Query: "What are these?"},
		route:   llm.Route{Name: "small", ContextTokens: window, NoTools: true},
		history: history,
	}
	_, plain := (&Service{}).buildPrompt(tn)
	tn.images = make([]llm.Image, 4)
	_, req := (&Service{}).buildPrompt(tn)
	require.Less(t, len(req.Messages), len(plain.Messages), "less history fits beside the images")
	require.LessOrEqual(t, llm.PromptTokens(req)+llm.MaxOutputTokens, window)
}
