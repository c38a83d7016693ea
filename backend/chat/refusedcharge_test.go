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
