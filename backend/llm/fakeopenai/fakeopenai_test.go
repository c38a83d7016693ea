package fakeopenai_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/llm/fakeopenai"
)

// The official SDK reads the fake's stream as Parley's provider does: the
// text, the finish reason and the usage.
func TestStreamReadsAsOpenAI(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&fakeopenai.Model{Tokens: []string{"Hel", "lo \"there\"."}, Gap: 5 * time.Millisecond})
	t.Cleanup(srv.Close)
	m := llm.NewOpenAI(llm.OpenAIConfig{APIKey: "sk", BaseURL: srv.URL + "/v1"})
	var text string
	var usage *llm.Usage
	err := m.Stream(context.Background(), llm.Request{Model: "gpt-4o-mini", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}},
		func(ev llm.Event) error {
			text += ev.Text
			if ev.Usage != nil {
				usage = ev.Usage
			}
			return nil
		})
	require.NoError(t, err)
	require.Equal(t, `Hello "there".`, text)
	require.Equal(t, &llm.Usage{PromptTokens: 12, CompletionTokens: 2}, usage)
}

// A request without stream gets the whole chat.completion object.
func TestCompletionReadsAsOpenAI(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&fakeopenai.Model{Tokens: []string{"Hel", "lo."}})
	t.Cleanup(srv.Close)
	c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("sk"), option.WithMaxRetries(0))
	res, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	require.NoError(t, err)
	require.Len(t, res.Choices, 1)
	require.Equal(t, "Hello.", res.Choices[0].Message.Content)
	require.Equal(t, "stop", res.Choices[0].FinishReason)
	require.EqualValues(t, 14, res.Usage.TotalTokens)
}

// Anything but POST /v1/chat/completions is not found; a body that is not
// JSON is a 400.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&fakeopenai.Model{Tokens: []string{"x"}})
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL + "/v1/chat/completions")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 404, resp.StatusCode)
	resp, err = srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode)
}
