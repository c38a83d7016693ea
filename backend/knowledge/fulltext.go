package knowledge

import (
	"context"
	"math"
	"sort"

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
	// from the rarest up while their chunk counts add up to at most Budget
	// (the rarest always); commoner terms are left out. They weigh least
	// (their idf is lowest), and a question full of common words would
	// otherwise read most of a large datastore's postings.
	Budget int64
}

// BM25 holds the parameters the search uses; the evaluation (make
// eval-knowledge, PARLEY_EVAL_SWEEP=1) chose them, docs/benchmarks.md says
// how.
var BM25 = BM25Params{K1: 1.2, B: 0.75, TitleBoost: 5, Budget: 10_000}

// textPlan is the full-text half of one search: the query's terms that it
// reads, with their inverse document frequencies, and the datastores'
// average chunk length.
type textPlan struct {
	terms     []string
	idfs      []float64
	avgTokens float64
}

// planText weighs the query's terms (rows of TextTerms) and picks the ones
// to read; ok is false when no term occurs in the datastores.
func planText(rows []dbq.TextTermsRow, budget int64) (p textPlan, ok bool) {
	type term struct {
		text string
		df   int64
	}
	var found []term
	var chunks, tokens int64
	for _, r := range rows {
		chunks, tokens = r.Chunks, r.Tokens
		if r.Df > 0 {
			found = append(found, term{r.Term, r.Df})
		}
	}
	if len(found) == 0 || chunks <= 0 {
		return p, false
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].df < found[j].df })
	n := float64(chunks)
	var sum int64
	for _, t := range found {
		if len(p.terms) > 0 && sum+t.df > budget {
			break
		}
		sum += t.df
		df := float64(t.df)
		p.terms = append(p.terms, t.text)
		p.idfs = append(p.idfs, math.Log(1+(n-df+0.5)/(df+0.5)))
	}
	p.avgTokens = max(float64(tokens)/n, 1)
	return p, true
}

// textSearch runs the full-text half over the datastores ids: up to limit
// chunks, best first.
func (k *Knowledge) textSearch(ctx context.Context, q *dbq.Queries, org uuid.UUID, ids, datasourceIDs []uuid.UUID, query string, limit int) ([]Result, error) {
	rows, err := q.TextTerms(ctx, dbq.TextTermsParams{Query: query, OrgID: org, DatastoreIds: ids})
	if err != nil {
		return nil, err
	}
	p, ok := planText(rows, BM25.Budget)
	if !ok {
		return nil, nil
	}
	if datasourceIDs == nil {
		datasourceIDs = []uuid.UUID{}
	}
	found, err := q.SearchText(ctx, dbq.SearchTextParams{
		Terms: p.terms, Idfs: p.idfs,
		OrgID: org, DatastoreIds: ids, DatasourceIds: datasourceIDs,
		K1: BM25.K1, B: BM25.B, AvgTokens: p.avgTokens, TitleBoost: BM25.TitleBoost,
		K: int32(limit),
	})
	if err != nil {
		return nil, err
	}
	out := make([]Result, len(found))
	for i, r := range found {
		out[i] = Result{ChunkID: r.ID, DatasourceID: r.DatasourceID, Text: r.Text, Title: r.Title, Heading: r.Heading, URL: r.Url, Page: int(r.Page)}
	}
	return out, nil
}
