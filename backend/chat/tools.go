package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/llm"
)

// maxToolRounds is how many times one turn lets the model call tools; the
// call after the last round offers none, so the model must answer.
const maxToolRounds = 3

// DatastoreQueryTool lets a tool-calling model search the agent's datastores
// again, in its own words, when the passages retrieved for the question do
// not answer it. It is offered to agents with datastores (and to models
// whose route allows tools); its results join the reply's sources.
const DatastoreQueryTool = "datastore_query"

// datastoreQueryMaxK bounds the passages one tool call may ask for.
const datastoreQueryMaxK = 10

var datastoreQuery = llm.Tool{
	Name: DatastoreQueryTool,
	Description: "Search this assistant's knowledge base for passages relevant to a query. " +
		"Use it when the passages already given do not answer the question: rephrase, or ask about one part of it.",
	Parameters: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"query": map[string]any{"type": "string", "description": "What to look for, in words likely to appear in the documents."},
			"topK":  map[string]any{"type": "integer", "minimum": 1, "maximum": datastoreQueryMaxK, "description": "How many passages to return (default 5)."},
		},
		// []string, not []any: the Anthropic adapter reads it so.
		"required": []string{"query"},
	},
}

// toolRun is what running one turn's tool calls needs: the organization and
// the agent's datastores, read when the turn began, and the request's filter.
type toolRun struct {
	org    uuid.UUID
	stores []dbq.Datastore
	filter []uuid.UUID
}

// run answers one tool call. A call the model got wrong (unknown tool, bad
// arguments) is answered with an error result the model can read and
// correct; only a failed search (the database) is an error of the turn.
func (s *Service) runTool(ctx context.Context, tr toolRun, call llm.ToolCall, numbered int) (llm.ToolResult, []knowledge.Result, error) {
	res := llm.ToolResult{CallID: call.ID, Name: call.Name}
	if call.Name != DatastoreQueryTool {
		res.IsError, res.Content = true, fmt.Sprintf("unknown tool %q; the only tool is %s", call.Name, DatastoreQueryTool)
		return res, nil, nil
	}
	var args struct {
		Query string `json:"query"`
		TopK  int    `json:"topK"`
	}
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil || strings.TrimSpace(args.Query) == "" {
		res.IsError, res.Content = true, `the arguments must be a JSON object with a non-empty "query" string`
		return res, nil, nil
	}
	k := args.TopK
	if k <= 0 {
		k = passagesPerTurn
	}
	k = min(k, datastoreQueryMaxK)
	var found []knowledge.Result
	// SECURITY: the same organization and datastores as the turn's first search.
	err := s.Store.Tenant(ctx, tr.org, func(q *dbq.Queries) error {
		var err error
		found, err = s.Knowledge.Search(ctx, q, tr.org, tr.stores, tr.filter, args.Query, k)
		return err
	})
	if err != nil {
		return res, nil, err
	}
	res.Content = passagesText(found, numbered)
	return res, found, nil
}

// passagesText is search results as the model reads them, numbered from
// after the numbered passages it already has.
func passagesText(rs []knowledge.Result, numbered int) string {
	if len(rs) == 0 {
		return "No passages matched."
	}
	var b strings.Builder
	for i, r := range rs {
		b.WriteString("[" + strconv.Itoa(numbered+i+1) + "] " + r.Source() + "\n" + r.Text + "\n\n")
	}
	return strings.TrimSpace(b.String())
}
