package knowledge

import (
	"context"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/db/dbq"
)

// The full-text half of a search ranks like BM25 (Robertson and Zaragoza,
// "The Probabilistic Relevance Framework: BM25 and Beyond"): a term weighs
// its inverse document frequency in the datastores searched, its frequency
// in a chunk saturates (K1), and a long chunk's frequencies count less than
// a short one's (B, against the average chunk). Terms are Postgres' English
// lexemes (stemmed; stop words dropped), and a term of a chunk's title or
// heading path counts TitleBoost places more. Postings and statistics come
// from text_postings and datastore_text_stats, kept by triggers on chunks
// (migrations/00016, which says why not the GIN index). Postgres' own
// ts_rank_cd, used before, has no inverse document frequency: every word of
// a question counted alike.
type BM25Params struct {
	K1, B, TitleBoost float64
	// Budget bounds the postings a search reads: the query's terms count
	// from the rarest up (fewest chunks first, then by term) while their
	// chunk counts add up to at most Budget (the rarest always); commoner
	// terms are left out. They weigh least (their idf is lowest), and a
	// question full of common words would otherwise read most of a large
	// datastore's postings. The statement SearchText plans so
	// (backend/db/queries/knowledge.sql), with each term's idf
	// ln(1 + (N - df + 0.5) / (df + 0.5)) over the N visible chunks.
	Budget int64
}

// BM25 holds the parameters the search uses; the evaluation (make
// eval-knowledge, PARLEY_EVAL_SWEEP=1) chose them, docs/benchmarks.md says
// how.
var BM25 = BM25Params{K1: 1.2, B: 0.75, TitleBoost: 5, Budget: 10_000}

// textSearch runs the full-text half over the datastores ids with BM25's
// parameters: up to limit chunks, best first.
func (k *Knowledge) textSearch(ctx context.Context, q *dbq.Queries, org uuid.UUID, ids, datasourceIDs []uuid.UUID, query string, limit int) ([]Result, error) {
	return BM25.search(ctx, q, org, ids, datasourceIDs, query, limit)
}

// search is the full-text half with these parameters: one statement,
// SearchText, which also picks the query's terms to read (Budget) and
// weighs them (backend/db/queries/knowledge.sql says how).
func (p BM25Params) search(ctx context.Context, q *dbq.Queries, org uuid.UUID, ids, datasourceIDs []uuid.UUID, query string, limit int) ([]Result, error) {
	if datasourceIDs == nil {
		datasourceIDs = []uuid.UUID{}
	}
	found, err := q.SearchText(ctx, dbq.SearchTextParams{
		Query: query, OrgID: org, DatastoreIds: ids, DatasourceIds: datasourceIDs,
		Budget: p.Budget, K1: p.K1, B: p.B, TitleBoost: p.TitleBoost,
		K: int32(limit),
	})
	if err != nil {
		return nil, err
	}
	out := make([]Result, len(found))
	for i, r := range found {
		out[i] = Result{ChunkID: r.ID, DatasourceID: r.DatasourceID, Text: r.Text, Title: r.Title, Heading: r.Heading, URL: r.Url, Page: int(r.Page), Score: r.Score}
	}
	return out, nil
}
