package contact_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/testenv"
)

// A contact is deleted while one of its conversations is being deleted:
// the conversation's deletion takes the conversation, then its messages
// (the cascade); DeleteContact must take them in that order too. Taking
// the lead_capture answers (ForgetContactLeadCaptures) before the
// conversations it unlinks, it held an answer the conversation's deletion
// waited for while it waited for the conversation: a deadlock, one of the
// two aborted.
func TestDeleteContactWhileItsConversationIsDeleted(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	r := e.Do("POST", "/api/agents", e.A.Key, map[string]any{"name": "Sales", "instructions": "Help.", "tools": []string{"lead_capture"}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var ag struct{ ID string }
	r.JSON(t, &ag)
	r = e.Do("POST", "/api/v2/agent/"+ag.ID+"/chat", e.A.Key, map[string]any{
		"query": "Hi, my name is Erin Gone, reach me at erin.gone@example.com", "conversationId": "lead1"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = e.Do("GET", "/api/contacts?email=erin.gone@example.com", e.A.Key, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var p pageJSON
	r.JSON(t, &p)
	require.Len(t, p.Contacts, 1)

	conn, err := pgx.Connect(ctx, e.DBURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	// The conversation's deletion has taken the conversation (DELETE's
	// first lock), not yet its messages.
	del, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer del.Rollback(ctx) //nolint:errcheck
	_, err = del.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
	require.NoError(t, err)
	_, err = del.Exec(ctx, "SELECT 1 FROM conversations WHERE org_id = $1 AND id = 'lead1' FOR UPDATE", e.A.ID)
	require.NoError(t, err)

	done := make(chan testenv.Response, 1)
	go func() { done <- e.Do("DELETE", "/api/contacts/"+p.Contacts[0].ID, e.A.Key, nil) }()
	require.Eventually(t, func() bool {
		var waiting int
		err := e.App.Store.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting)
		return err == nil && waiting > 0
	}, 10*time.Second, 10*time.Millisecond, "the contact's deletion waits for the conversation")
	// The deletion goes on to the messages, and commits.
	_, err = del.Exec(ctx, "DELETE FROM conversations WHERE org_id = $1 AND id = 'lead1'", e.A.ID)
	require.NoError(t, err, "the conversation's deletion")
	require.NoError(t, del.Commit(ctx))
	res := <-done
	require.Equal(t, http.StatusOK, res.Status, "the contact's deletion: %s", res.Body)
}
