package chat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/testenv"
)

// A streaming turn of an agent with knowledge sends its sources before the
// model is called. When the provider then refuses the call (429, 5xx)
// before producing anything, nothing was generated: the turn is not a
// turn the organization pays for, and no empty answer joins the
// conversation. It used to store an empty incomplete answer charged with
// the whole prompt's estimated tokens, a turn in the usage report.
func TestRefusedStreamingTurnIsNotCharged(t *testing.T) {
	t.Parallel()
	fake := testenv.NewFakeProvider(t)
	f := &fixture{Env: testenv.New(t, testenv.WithWorkers, testenv.WithFakeModels(fake)), fake: fake}
	ctx := context.Background()
	store, _ := f.datastore(t, "Opening hours are nine to five.")
	agent := f.agent(t, fmt.Sprintf(`{"name":"K","instructions":"i","datastores":[%q]}`, store))

	f.fake.Reply = func(int, map[string]any) testenv.FakeReply { return testenv.FakeReply{Status: 429} }
	resp := f.Post("/api/v2/agent/"+agent+"/chat", bearer(f.A.Key), `{"query":"What are the opening hours?","conversationId":"refused","streaming":true}`)
	defer resp.Body.Close()
	var types []string
	for _, ev := range testenv.ReadSSE(t, resp.Body) {
		var m map[string]any
		if json.Unmarshal([]byte(ev.Data), &m) == nil {
			types = append(types, fmt.Sprint(m["type"]))
		} else {
			types = append(types, ev.Data)
		}
	}
	require.Contains(t, types, "source", "the passage went out before the model was called: %v", types)
	require.Equal(t, []string{"error", "[DONE]"}, types[len(types)-2:])

	// A reply the provider's content filter ended before anything was
	// said is no answer either: a 502 naming the reason, not an empty
	// answer stored and shown as one (the provider asked once).
	calls := len(f.fake.Requests())
	f.fake.Reply = func(int, map[string]any) testenv.FakeReply { return testenv.FakeReply{Finish: "content_filter"} }
	r := f.Do("POST", "/api/v2/agent/"+agent+"/chat", f.A.Key, `{"query":"Say something the filter stops.","conversationId":"filtered"}`)
	require.Equal(t, 502, r.Status, "%s", r.Body)
	require.Contains(t, r.Err(t).Error.Message, "without an answer (content_filter)")
	require.Len(t, f.fake.Requests(), calls+1, "asked once")
	r = f.Do("GET", "/api/v2/conversations/filtered", f.A.Key, nil)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	var conv struct{ Messages []struct{ Role, Text string } }
	r.JSON(t, &conv)
	require.Len(t, conv.Messages, 1, "the question alone: %+v", conv.Messages)
	require.Equal(t, "user", conv.Messages[0].Role)

	var answers int
	var cost float64
	require.NoError(t, f.App.Store.Tenant(ctx, f.A.ID, func(q *dbq.Queries) error {
		rows, err := q.UsageByDayAndAgent(ctx, dbq.UsageByDayAndAgentParams{OrgID: f.A.ID, Since: time.Now().Add(-time.Hour)})
		for _, row := range rows {
			answers += int(row.Turns)
			cost += row.Cost
		}
		return err
	}))
	require.Zero(t, answers, "a refused call is no turn")
	require.Zero(t, cost, "a refused call costs nothing")
}
