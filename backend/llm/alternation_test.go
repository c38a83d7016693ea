package llm_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/llm"
)

// A history as chat stores it after two turns of one conversation ran at
// once (both questions, then the answers as they finished), cut to the
// prompt's budget after a greeting, reaches Anthropic and Gemini as their
// APIs take a conversation: from the user, the user and the assistant in
// turn. Each fake refuses what the real API refused, with its error.
func TestHistoryAlternatesOnTheWire(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\n\x00\x01")
	req := llm.Request{Model: "gemini-1.5-pro", System: "Be brief.", Messages: []llm.Message{
		{Role: llm.RoleAssistant, Content: "Welcome back."},
		{Role: llm.RoleUser, Content: "Do you ship to Norway?"},
		{Role: llm.RoleUser, Content: "Do you ship to Norway?"},
		{Role: llm.RoleAssistant, Content: "Yes, in five days."},
		{Role: llm.RoleAssistant, Content: "Yes, we do."},
		{Role: llm.RoleUser, Content: "And this one?", Images: []llm.Image{{MIMEType: "image/png", Data: png}}},
	}}
	want := []wireTurn{
		{"user", "Do you ship to Norway?\n\nDo you ship to Norway?"},
		{"assistant", "Yes, in five days.\n\nYes, we do."},
		{"user", "And this one?"},
	}
	for _, tc := range []struct {
		wire wire
		// turns reads a request body's turns (role and text), and whether
		// the last holds an image.
		turns   func(t *testing.T, body []byte) ([]wireTurn, bool)
		refused func(w http.ResponseWriter, msg string)
	}{
		{anthropicWire, anthropicTurns, func(w http.ResponseWriter, msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, "messages: "+msg)
		}},
		{geminiWire, geminiTurns, func(w http.ResponseWriter, msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			fmt.Fprintf(w, `{"error":{"code":400,"message":%q,"status":"INVALID_ARGUMENT"}}`, msg)
		}},
	} {
		t.Run(tc.wire.name, func(t *testing.T) {
			t.Parallel()
			var got []wireTurn
			var image bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				got, image = tc.turns(t, body)
				if msg := alternationError(got); msg != "" {
					tc.refused(w, msg)
					return
				}
				tc.wire.text(w, []string{"We do."}, 10, 2)
			}))
			t.Cleanup(srv.Close)
			text, _, _, err := collect(t, tc.wire.newModel(srv.URL), req)
			require.NoError(t, err)
			require.Equal(t, "We do.", text)
			require.Equal(t, want, got)
			require.True(t, image, "the question's image is kept")
		})
	}
}

// alternationError is what Anthropic and Gemini said of a conversation
// that does not begin with the user or does not alternate; "" when it does.
func alternationError(turns []wireTurn) string {
	for i, tr := range turns {
		if i == 0 && tr.Role != "user" {
			return `first message must use the "user" role`
		}
		if i > 0 && turns[i-1].Role == tr.Role {
			return "Please ensure that multiturn requests alternate between user and model."
		}
	}
	return ""
}

func anthropicTurns(t *testing.T, body []byte) ([]wireTurn, bool) {
	var req struct {
		Messages []struct {
			Role    string
			Content []struct{ Type, Text string }
		}
	}
	require.NoError(t, json.Unmarshal(body, &req))
	var out []wireTurn
	image := false
	for i, m := range req.Messages {
		text := ""
		for _, b := range m.Content {
			text += b.Text
			image = image || (i == len(req.Messages)-1 && b.Type == "image")
		}
		out = append(out, wireTurn{m.Role, text})
	}
	return out, image
}

func geminiTurns(t *testing.T, body []byte) ([]wireTurn, bool) {
	var req struct {
		Contents []struct {
			Role  string
			Parts []struct {
				Text       string
				InlineData any `json:"inlineData"`
			}
		}
	}
	require.NoError(t, json.Unmarshal(body, &req))
	var out []wireTurn
	image := false
	for i, c := range req.Contents {
		text := ""
		for _, p := range c.Parts {
			text += p.Text
			image = image || (i == len(req.Contents)-1 && p.InlineData != nil)
		}
		role := c.Role
		if role == "model" {
			role = "assistant"
		}
		out = append(out, wireTurn{role, text})
	}
	return out, image
}

// wireTurn is one turn of a request as the provider reads it.
type wireTurn struct{ Role, Text string }
