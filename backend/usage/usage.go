// Package usage sums an organization's chat turns, tokens and cost per day
// and per agent, from the messages chat stores and what deleted
// conversations left in usage_deleted (the console's overview): deleting a
// conversation or an agent does not change what a month cost.
//
// It reads only the caller's organization, in its tenant transaction.
package usage

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// Totals are what a period cost.
type Totals struct {
	Turns  int64
	Tokens int64
	Cost   float64
	// ToolCalls are the tool calls the turns made.
	ToolCalls int64
}

func (t *Totals) add(r dbq.UsageByDayAndAgentRow) {
	t.Turns += r.Turns
	t.Tokens += r.Tokens
	t.ToolCalls += r.ToolCalls
	t.Cost += r.Cost
}

// Day is one UTC day's totals.
type Day struct {
	Date time.Time
	Totals
}

// Report is an organization's usage over the last Days days.
type Report struct {
	// Days holds one entry per day, oldest first, today last.
	Days []Day
	// Today and Month (the calendar month, UTC) in all.
	Today, Month Totals
	// ByAgent holds today's and this month's totals per agent.
	ByAgent map[uuid.UUID]*AgentTotals
}

// AgentTotals are one agent's totals.
type AgentTotals struct{ Today, Month Totals }

// Days is how far back a report looks.
const Days = 30

// Of returns org's report as of now.
func Of(ctx context.Context, store *db.Store, org uuid.UUID, now time.Time) (*Report, error) {
	now = now.UTC()
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	first := today.AddDate(0, 0, -(Days - 1))
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	since := first
	if month.Before(first) {
		since = month
	}
	var rows []dbq.UsageByDayAndAgentRow
	err := store.Tenant(ctx, org, func(q *dbq.Queries) (err error) {
		rows, err = q.UsageByDayAndAgent(ctx, dbq.UsageByDayAndAgentParams{OrgID: org, Since: since})
		return err
	})
	if err != nil {
		return nil, err
	}
	rep := &Report{ByAgent: map[uuid.UUID]*AgentTotals{}}
	index := map[time.Time]int{}
	for i := range Days {
		d := first.AddDate(0, 0, i)
		index[d] = i
		rep.Days = append(rep.Days, Day{Date: d})
	}
	for _, r := range rows {
		d := time.Date(r.Day.Time.Year(), r.Day.Time.Month(), r.Day.Time.Day(), 0, 0, 0, 0, time.UTC)
		if i, ok := index[d]; ok {
			rep.Days[i].add(r)
		}
		a := rep.ByAgent[r.AgentID]
		if a == nil {
			a = &AgentTotals{}
			rep.ByAgent[r.AgentID] = a
		}
		if !d.Before(month) {
			rep.Month.add(r)
			a.Month.add(r)
		}
		if d.Equal(today) {
			rep.Today.add(r)
			a.Today.add(r)
		}
	}
	return rep, nil
}
