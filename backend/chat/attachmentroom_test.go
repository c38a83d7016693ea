package chat_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/testenv"
)

// A message's documents take what the model's window leaves after the
// rest of the prompt and the answer's room, not a fixed 8,000 tokens:
// on an 8k model (a models file's contextTokens) a long file alone filled
// the window, the turn asked for prompt + 256 tokens past it, and the
// provider (OpenAI, vLLM) refused it: every message with a long attachment
// failed.
func TestAttachmentsFitTheWindow(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	const window = 8192
	e := smallWindow(t, fake, window, func(c *server.Config) {
		c.AttachmentFetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	f := &fixture{Env: e, fake: fake}
	agent := f.agent(t, `{"name":"n","instructions":"`+strings.Repeat("Answer politely and from the files. ", 100)+`"}`)
	long := strings.Repeat("The warranty covers parts and labour for two years. ", 3000)
	srv := newFiles(t, map[string][]byte{"/long.md": []byte("# Warranty\n\n" + long), "/notes.txt": []byte("Order 4417 shipped on Monday.")})

	for i, atts := range []string{
		`{"url":"` + srv.URL + `/long.md"}`,
		`{"url":"` + srv.URL + `/long.md"},{"url":"` + srv.URL + `/notes.txt"}`,
	} {
		status, rep, raw := f.chat(t, agent, f.A.Key, `{"query":"What does the warranty cover?","conversationId":"room","attachments":[`+atts+`]}`)
		require.Equal(t, http.StatusOK, status, "%s", raw.Body)
		require.Equal(t, "Hello from the fake model.", rep.Answer)
		req := fake.Requests()[i]
		sent := openAIPromptTokens(req)
		bound := int(req["max_completion_tokens"].(float64))
		require.LessOrEqual(t, sent+bound, window, "prompt %d tokens + answer %d fit the window", sent, bound)
		require.Equal(t, llm.MaxOutputTokens, bound, "the file leaves the answer its room")
		text, _ := userText(t, fake, i)
		require.Contains(t, text, "The warranty covers parts", "the file is given, cut")
		require.Contains(t, text, "[… the rest of this file is not shown]")
		if i == 1 {
			require.Contains(t, text, "Order 4417 shipped on Monday.", "a short file beside it is whole")
		}
	}
}
