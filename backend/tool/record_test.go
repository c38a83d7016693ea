package tool_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/tool"
	"github.com/parleyhq/parley/backend/usage"
)

// A turn's tool calls are part of its record: the reply and the done event
// list them, its usage counts them, the assistant message stores them (read
// back through the conversations API) and the organization's usage adds
// them up.
func TestToolCallsAreRecordedAndCounted(t *testing.T) {
	t.Parallel()
	fp := testenv.NewFakeProvider(t)
	fp.Reply = actor
	e := testenv.New(t, testenv.WithFakeModels(fp))
	id := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.LeadCapture}})["id"].(string)

	// JSON: one good call.
	r := e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"lead:{\"email\":\"grace@example.com\"}","conversationId":"rec-1"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var rep struct {
		ToolCalls []map[string]any `json:"toolCalls"`
		Usage     struct {
			ToolCalls int `json:"toolCalls"`
		} `json:"usage"`
	}
	r.JSON(t, &rep)
	require.Len(t, rep.ToolCalls, 1)
	require.Equal(t, tool.LeadCapture, rep.ToolCalls[0]["name"])
	require.Equal(t, "ok", rep.ToolCalls[0]["status"])
	require.Equal(t, "lc_1", rep.ToolCalls[0]["id"])
	require.JSONEq(t, `{"email":"grace@example.com"}`, rep.ToolCalls[0]["arguments"].(string))
	require.Equal(t, 1, rep.Usage.ToolCalls)

	// Streaming: a bad call is recorded too, with its error.
	events := streamEvents(t, e, id, e.A.Key, `{"query":"lead:{\"firstName\":\"Bob\"}","conversationId":"rec-1","streaming":true}`)
	done := ofType(events, "done")
	require.Len(t, done, 1)
	calls, _ := done[0]["toolCalls"].([]any)
	require.Len(t, calls, 1, "the done event lists the turn's calls: %v", done[0])
	require.Equal(t, "error", calls[0].(map[string]any)["status"])
	require.Equal(t, float64(1), done[0]["usage"].(map[string]any)["toolCalls"])

	// A turn with no calls lists none.
	r = e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"hello","conversationId":"rec-1"}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var plain map[string]any
	r.JSON(t, &plain)
	require.NotContains(t, plain, "toolCalls")
	require.Equal(t, float64(0), plain["usage"].(map[string]any)["toolCalls"])

	// The conversation keeps them on the assistant messages, in order.
	r = e.Do("GET", "/api/v2/conversations/rec-1", e.A.Key, "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var conv struct {
		Messages []struct {
			Role      string           `json:"role"`
			ToolCalls []map[string]any `json:"toolCalls"`
		} `json:"messages"`
	}
	r.JSON(t, &conv)
	var stored [][]map[string]any
	for _, m := range conv.Messages {
		if m.Role == "assistant" {
			stored = append(stored, m.ToolCalls)
		}
	}
	require.Len(t, stored, 3)
	require.Len(t, stored[0], 1)
	require.Equal(t, "ok", stored[0][0]["status"])
	require.Equal(t, "contact recorded: email grace@example.com", stored[0][0]["result"])
	require.Len(t, stored[1], 1)
	require.Equal(t, "error", stored[1][0]["status"])
	require.Empty(t, stored[2])

	// Usage adds them up, for A only.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	repA, err := usage.Of(ctx, e.App.Store, e.A.ID, time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(2), repA.Today.ToolCalls)
	require.Equal(t, int64(3), repA.Today.Turns)
	repB, err := usage.Of(ctx, e.App.Store, e.B.ID, time.Now())
	require.NoError(t, err)
	require.Zero(t, repB.Today.ToolCalls)
}
