package tool_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/tool"
)

// A deleted contact's details leave the lead_capture calls that recorded
// them, also in a conversation that names another contact since: the
// visitor (or a model steered by a page) gave a second email after the
// first, and the conversation was linked to the second contact. The first
// call kept the deleted contact's email, name and note in the history, its
// exports and its stream's replays.
func TestLeadCaptureForgottenInARelinkedConversation(t *testing.T) {
	t.Parallel()
	fp := testenv.NewFakeProvider(t)
	fp.Reply = actor
	e := testenv.New(t, testenv.WithFakeModels(fp))
	id := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.LeadCapture}})["id"].(string)
	for _, args := range []string{
		`{\"email\":\"Gone.Person@Example.com\",\"firstName\":\"Gone\",\"note\":\"private-note-of-gone\"}`,
		`{\"email\":\"kept@example.com\",\"firstName\":\"Kept\"}`,
	} {
		r := e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"lead:`+args+`","conversationId":"relink-1"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	gone, ok := contactOf(t, e, e.A.Key, "gone.person@example.com")
	require.True(t, ok)
	kept, ok := contactOf(t, e, e.A.Key, "kept@example.com")
	require.True(t, ok)
	require.Equal(t, []any{"relink-1"}, kept["conversationIds"], "the conversation names the second contact")

	r := e.Do("DELETE", "/api/contacts/"+gone["id"].(string), e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	var hist struct {
		Messages []struct {
			Role      string
			ToolCalls []map[string]any
		}
	}
	h := e.Do("GET", "/api/v2/conversations/relink-1", e.A.Key, nil)
	require.Equal(t, http.StatusOK, h.Status, "%s", h.Body)
	h.JSON(t, &hist)
	var calls []string
	for _, m := range hist.Messages {
		for _, c := range m.ToolCalls {
			if c["name"] == tool.LeadCapture {
				calls = append(calls, c["arguments"].(string)+" => "+c["result"].(string))
			}
		}
	}
	require.Len(t, calls, 2, "%s", h.Body)
	all := strings.ToLower(strings.Join(calls, "\n"))
	require.NotContains(t, all, "gone.person@example.com")
	require.NotContains(t, all, "private-note-of-gone")
	require.Contains(t, all, "kept@example.com", "the other contact's call is untouched")
}

// The model calls lead_capture again with all it knows when the visitor
// adds a detail (its description asks it to), or retries a call: the note
// it already recorded is not added to the contact's notes a second time.
func TestLeadCaptureRepeatedNoteIsKeptOnce(t *testing.T) {
	t.Parallel()
	fp := testenv.NewFakeProvider(t)
	fp.Reply = actor
	e := testenv.New(t, testenv.WithFakeModels(fp))
	id := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.LeadCapture}})["id"].(string)
	for _, args := range []string{
		`{\"email\":\"twice@example.com\",\"note\":\"Wants a quote for 20 seats.\"}`,
		`{\"email\":\"twice@example.com\",\"note\":\"Wants a quote for 20 seats.\"}`,
		`{\"email\":\"twice@example.com\",\"firstName\":\"Tess\",\"note\":\"Wants a quote for 20 seats.\"}`,
	} {
		r := e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"lead:`+args+`","conversationId":"twice-1"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	c, ok := contactOf(t, e, e.A.Key, "twice@example.com")
	require.True(t, ok)
	require.Equal(t, "Tess", c["firstName"])
	require.Equal(t, "Wants a quote for 20 seats.", c["notes"])
}

// The same, in the message.created deliveries kept for retries and
// replays: an answer's delivered lead_capture calls lose what they
// recorded of the deleted contact as the stored answer's did; a pending
// one is not sent with it, nor can a replay send it again. The other
// contact's call keeps its details.
func TestLeadCaptureForgottenInDeliveredAnswers(t *testing.T) {
	t.Parallel()
	e, gone := leadDeliveries(t, "delivered-1")
	require.Contains(t, deliveredLeadCaptures(t, e), "private-note-of-gone")

	r := e.Do("DELETE", "/api/contacts/"+gone, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	all := deliveredLeadCaptures(t, e)
	require.NotContains(t, all, "gone.person@example.com")
	require.NotContains(t, all, "private-note-of-gone")
	require.Contains(t, all, "kept@example.com", "the other contact's call is untouched")
}

// The same when the answer is no longer stored: its conversation was
// deleted first (a delivery keeps what it sent meanwhile), then the
// contact. The delivered lead_capture call that names the deleted
// contact's email loses what it recorded all the same; another contact's
// call in the same conversation keeps its details.
func TestLeadCaptureForgottenInDeliveredAnswersOfADeletedConversation(t *testing.T) {
	t.Parallel()
	e, gone := leadDeliveries(t, "deleted-1")
	r := e.Do("DELETE", "/api/v2/conversations/deleted-1", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, deliveredLeadCaptures(t, e), "private-note-of-gone", "a delivery keeps what it sent")

	r = e.Do("DELETE", "/api/contacts/"+gone, e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	all := deliveredLeadCaptures(t, e)
	require.NotContains(t, all, "gone.person@example.com")
	require.NotContains(t, all, "private-note-of-gone")
	require.Contains(t, all, "kept@example.com", "the other contact's call is untouched")
}

// leadDeliveries is a server whose organization A has a webhook of
// message.created and conversation conv, where lead_capture recorded two
// contacts in turn; gone is the first contact's id.
func leadDeliveries(t *testing.T, conv string) (e *testenv.Env, gone string) {
	t.Helper()
	fp := testenv.NewFakeProvider(t)
	fp.Reply = actor
	e = testenv.New(t, testenv.WithFakeModels(fp))
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": "https://203.0.113.7/hook", "events": []string{"message.created"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	id := createAgent(t, e, e.A.Key, map[string]any{"tools": []string{tool.LeadCapture}})["id"].(string)
	for _, args := range []string{
		`{\"email\":\"Gone.Person@Example.com\",\"firstName\":\"Gone\",\"note\":\"private-note-of-gone\"}`,
		`{\"email\":\"kept@example.com\",\"firstName\":\"Kept\"}`,
	} {
		r := e.Do("POST", "/api/v2/agent/"+id+"/chat", e.A.Key, `{"query":"lead:`+args+`","conversationId":"`+conv+`"}`)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	c, ok := contactOf(t, e, e.A.Key, "gone.person@example.com")
	require.True(t, ok)
	return e, c["id"].(string)
}

// deliveredLeadCaptures is the lead_capture calls (arguments => result,
// lower case, a line each) of the answers' message.created deliveries.
func deliveredLeadCaptures(t *testing.T, e *testenv.Env) string {
	t.Helper()
	var out []string
	require.NoError(t, e.App.Store.TenantTx(context.Background(), e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		rows, err := tx.Query(context.Background(), `SELECT body FROM webhook_deliveries
			WHERE org_id = $1 AND event_type = 'message.created' ORDER BY created_at, id`, e.A.ID)
		if err != nil {
			return err
		}
		bodies, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
		for _, b := range bodies {
			var d struct {
				Data struct {
					Role      string
					ToolCalls []struct{ Name, Arguments, Result string }
				}
			}
			require.NoError(t, json.Unmarshal(b, &d))
			for _, c := range d.Data.ToolCalls {
				if d.Data.Role == "assistant" && c.Name == tool.LeadCapture {
					out = append(out, c.Arguments+" => "+c.Result)
				}
			}
		}
		return err
	}))
	require.Len(t, out, 2)
	return strings.ToLower(strings.Join(out, "\n"))
}
