// Package tool holds the functions a model may call during a chat turn
// (SPEC §2.1: datastore_query, web_search, lead_capture, http_request,
// request_human). Today one runs: datastore_query. The others are accepted
// on agents and not offered to models yet.
package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/llm"
)

// DatastoreQuery is the name of the tool that searches the agent's
// datastores.
const DatastoreQuery = "datastore_query"

// Offered reports whether an agent offers the tool name to its model: an
// agent's tools list is an allow-list when it names any tool; an empty list
// offers every tool the agent can use.
func Offered(agentTools []string, name string) bool {
	return len(agentTools) == 0 || slices.Contains(agentTools, name)
}

// datastoreQueryMaxK bounds the passages one call may ask for.
const datastoreQueryMaxK = 10

// defaultK is how many passages a call without topK gets.
const defaultK = 5

// Search is the datastore_query tool of one turn: it searches the
// datastores the turn's agent had when the turn began, in its organization,
// with the request's datasource filter.
type Search struct {
	Store     *db.Store
	Knowledge *knowledge.Knowledge
	Org       uuid.UUID
	Stores    []dbq.Datastore
	Filter    []uuid.UUID
}

// Definition is what the model is told of the tool.
func (*Search) Definition() llm.Tool {
	return llm.Tool{
		Name: DatastoreQuery,
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
}

// Run answers one call; numbered is how many passages the model already
// has (the new ones are numbered after them). A call the model got wrong
// (another tool, bad arguments) gets an error result the model can read and
// correct; only a failed search (the database) is an error of the turn.
func (s *Search) Run(ctx context.Context, call llm.ToolCall, numbered int) (llm.ToolResult, []knowledge.Result, error) {
	res := llm.ToolResult{CallID: call.ID, Name: call.Name}
	if call.Name != DatastoreQuery {
		res.IsError, res.Content = true, fmt.Sprintf("unknown tool %q; the only tool is %s", call.Name, DatastoreQuery)
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
		k = defaultK
	}
	k = min(k, datastoreQueryMaxK)
	var found []knowledge.Result
	// SECURITY: the same organization and datastores as the turn's first search.
	err := s.Store.Tenant(ctx, s.Org, func(q *dbq.Queries) error {
		var err error
		found, err = s.Knowledge.Search(ctx, q, s.Org, s.Stores, s.Filter, args.Query, k)
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
