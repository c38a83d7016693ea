package conversation_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/testenv"
)

// An agent deleted while people reply to its conversations and change their
// status: each request either happens before the deletion or finds the
// conversation gone (404), never a deadlock. The deletion takes the agent,
// then its conversations (cascade); a reply wrote its conversation, then
// checked the agent's key on its next write (the event trigger, the touch),
// waiting for the deletion that waited for it.
func TestPeopleRaceAgentDeletion(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	// Enterprise: the iterations' requests stay within its rate limit.
	org := e.Bootstrap("Race", "enterprise")
	ctx := context.Background()
	const iterations = 60
	for i := range iterations {
		r := e.Do("POST", "/api/agents", org.Key, map[string]any{"name": "Racer", "instructions": "Answer."})
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var a struct{ ID string }
		r.JSON(t, &a)
		agent := uuid.MustParse(a.ID)
		// Three conversations, each with a message: one people already
		// have (a reply only adds its message), two the model has.
		convs := []string{fmt.Sprintf("taken-%d", i), fmt.Sprintf("open-%d", i), fmt.Sprintf("status-%d", i)}
		require.NoError(t, e.App.Store.Tenant(ctx, org.ID, func(q *dbq.Queries) error {
			for _, c := range convs {
				if _, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: org.ID, ID: c, AgentID: agent, Channel: "api"}); err != nil {
					return err
				}
				if _, err := q.CreateMessage(ctx, dbq.CreateMessageParams{
					OrgID: org.ID, ID: uuid.New(), ConversationID: c, Role: "user", Content: "hello", Channel: "api",
					Attachments: []byte("[]"), Sources: []byte("[]"),
				}); err != nil {
					return err
				}
			}
			_, err := q.SetConversationStatus(ctx, dbq.SetConversationStatusParams{OrgID: org.ID, ID: convs[0], Status: "human_requested", ChangedBy: "test"})
			return err
		}))

		start := make(chan struct{})
		var wg sync.WaitGroup
		statuses := make([]int, 4)
		bodies := make([]string, 4)
		run := func(n int, method, path string, body any) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r := e.Do(method, path, org.Key, body)
				statuses[n], bodies[n] = r.Status, string(r.Body)
			}()
		}
		run(0, "DELETE", "/api/agents/"+a.ID, nil)
		run(1, "POST", "/api/v2/conversations/"+convs[0]+"/messages", map[string]any{"text": "a person again"})
		run(2, "POST", "/api/v2/conversations/"+convs[1]+"/messages", map[string]any{"text": "a person takes over"})
		run(3, "PUT", "/api/v2/conversations/"+convs[2], map[string]any{"status": "resolved", "reason": "done", "rating": 4})
		close(start)
		wg.Wait()

		require.Equal(t, http.StatusOK, statuses[0], "iteration %d: the deletion: %s", i, bodies[0])
		for n := 1; n < len(statuses); n++ {
			if statuses[n] != http.StatusOK && statuses[n] != http.StatusCreated {
				require.Equal(t, http.StatusNotFound, statuses[n], "iteration %d, request %d: %s", i, n, bodies[n])
			}
		}
	}
}
