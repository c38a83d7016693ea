package tool

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/parleyhq/parley/backend/contact"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/knowledge"
)

// DatastoreQuery is the name of the tool that searches the agent's
// datastores.
const DatastoreQuery = "datastore_query"

var datastoreQuery = Registration{
	Name: DatastoreQuery,
	Missing: func(d *Deps, p *Profile) string {
		switch {
		case d.Knowledge == nil:
			return "this server has no knowledge search"
		case !p.HasDatastores:
			return "the agent has no datastores"
		}
		return ""
	},
	New: func(d *Deps, t *Turn) Tool {
		return &Search{Deps: d, Turn: t}
	},
}

// datastoreQueryMaxK bounds the passages one call may ask for.
const datastoreQueryMaxK = 10

// defaultK is how many passages a call without topK gets.
const defaultK = 5

// Search is the datastore_query tool of one turn: it searches the
// datastores the turn's agent had when the turn began, in its organization,
// with the request's datasource filter.
type Search struct {
	*Deps
	*Turn
}

func (*Search) Name() string { return DatastoreQuery }

func (*Search) Description() string {
	return "Search this assistant's knowledge base for passages relevant to a query. " +
		"Use it when the passages already given do not answer the question: rephrase, or ask about one part of it."
}

func (*Search) Parameters() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"query": map[string]any{"type": "string", "description": "What to look for, in words likely to appear in the documents."},
			"topK":  map[string]any{"type": "integer", "minimum": 1, "maximum": datastoreQueryMaxK, "description": "How many passages to return (default 5)."},
		},
		// []string, not []any: the Anthropic adapter reads it so.
		"required": []string{"query"},
	}
}

// maxSearchQuery bounds a query's characters, as chat bounds a message's.
const maxSearchQuery = 32000

func (*Search) Traits() Traits { return Traits{Cites: true} }

// Run answers one call; its passages are numbered after the call's Cited.
// Bad arguments get an error result the model can read and correct; only a
// failed search (the database) is an error of the turn.
func (s *Search) Run(ctx context.Context, call Call) (Result, error) {
	var args struct {
		Query string `json:"query"`
		TopK  int    `json:"topK"`
	}
	// What is wrong is named: told only of "query", a model whose topK was
	// a string or 2.5 sent the same call again.
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil {
		return Errorf(`the arguments must be a JSON object with a non-empty "query" string and optionally "topK", an integer from 1 to %d: %s`, datastoreQueryMaxK, argsProblem(err)), nil
	}
	if strings.TrimSpace(args.Query) == "" {
		return Errorf(`the arguments must be a JSON object with a non-empty "query" string`), nil
	}
	// The model's query is searched as a visitor's is: text Postgres can
	// store (a NUL failed the turn as if the visitor had sent it), and no
	// longer than a chat message may be.
	if !contact.Storable(args.Query) || utf8.RuneCountInString(args.Query) > maxSearchQuery {
		return Errorf(`"query" must be text of at most %d characters, without NUL`, maxSearchQuery), nil
	}
	k := args.TopK
	if k <= 0 {
		k = defaultK
	}
	k = min(k, datastoreQueryMaxK)
	var found []knowledge.Result
	// Embedded before the transaction, as the turn's first search is.
	query, err := s.Knowledge.EmbedQuery(ctx, s.Stores, args.Query)
	if err != nil {
		return Result{}, err
	}
	// SECURITY: the same organization and datastores as the turn's first search.
	err = s.Store.Tenant(ctx, s.Org, func(q *dbq.Queries) error {
		var err error
		found, err = s.Knowledge.Search(ctx, q, s.Org, s.Stores, s.Filter, query, k)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	res := Result{Summary: strconv.Itoa(len(found)) + " passages"}
	for _, r := range found {
		res.Sources = append(res.Sources, KnowledgeSource(r))
	}
	res.Content = passagesText(found, res.Sources, call.Number())
	return res, nil
}

// passagesText is search results as the model reads them, numbered as the
// reply's sources number them (Call.Number).
func passagesText(rs []knowledge.Result, srcs []*parleyv1.Source, number func(*parleyv1.Source) int) string {
	if len(rs) == 0 {
		return "No passages matched."
	}
	var b strings.Builder
	for i, r := range rs {
		b.WriteString("[" + strconv.Itoa(number(srcs[i])) + "] " + r.Source() + "\n" + r.Text + "\n\n")
	}
	return strings.TrimSpace(b.String())
}

// KnowledgeSource is a passage as the reply cites it.
func KnowledgeSource(r knowledge.Result) *parleyv1.Source {
	excerpt := r.Text
	if len(excerpt) > 300 {
		excerpt = strings.ToValidUTF8(excerpt[:300], "") + "…"
	}
	title := r.Title
	if title == "" {
		title = r.DatasourceName
	}
	return &parleyv1.Source{
		Source: r.Source(), Score: r.Score, DatasourceName: r.DatasourceName, DatasourceId: r.DatasourceID.String(),
		Chunk: r.Text, Title: title, Url: r.URL, Excerpt: excerpt, Heading: r.Heading,
	}
}
