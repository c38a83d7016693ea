package knowledge

import (
	"context"
	"math"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/db/dbq"
)

// The full-text half of a search ranks like BM25 (Robertson and Zaragoza,
// "The Probabilistic Relevance Framework: BM25 and Beyond"): a term weighs
// its inverse document frequency in the datastores searched, its frequency
// in a chunk saturates (K1), and a long chunk's frequencies count less than
// a short one's (B, against the average chunk). Terms are Postgres' English
// lexemes (stemmed; stop words dropped), and a term of a chunk's title or
// heading path counts TitleBoost occurrences more (SearchText says how a
// term's occurrences are counted). The statistics come from
// datastore_terms and datastore_text_stats, kept by triggers on chunks
// (migrations/00016). Postgres' own ts_rank_cd, used before, has no inverse
// document frequency: every word of a question counted alike.
type BM25Params struct {
	K1, B, TitleBoost float64
	// Budget bounds the candidates the text half scores: the query's terms
	// match from the rarest up while their chunk counts add up to at most
	// Budget; the commoner terms still score the candidates but find none
	// of their own (a chunk holding only common words of the question ranks
	// low anyway). Scoring reads every candidate's terms, so this keeps a
	// question full of common words from reading most of a large datastore.
	Budget int64
}

// BM25 holds the parameters the search uses; the evaluation (make
// eval-knowledge) chose them, docs/benchmarks.md says how.
var BM25 = BM25Params{K1: 1.2, B: 0.75, TitleBoost: 5, Budget: 2000}

// textPlan is the full-text half of one search: the query's terms found in
// the datastores (quoted for a tsquery) with their inverse document
// frequencies, the tsquery that
// finds the candidates, and the datastores' average chunk length.
type textPlan struct {
	terms     []string
	idfs      []float64
	match     string
	avgTokens float64
}

// planText weighs the query's terms (rows of TextTerms) and picks the ones
// that find candidates; ok is false when no term occurs in the datastores.
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
	n := float64(chunks)
	for _, t := range found {
		df := float64(t.df)
		p.terms = append(p.terms, tsLexeme(t.text))
		p.idfs = append(p.idfs, math.Log(1+(n-df+0.5)/(df+0.5)))
	}
	p.avgTokens = max(float64(tokens)/n, 1)

	// Candidates: the rarest terms while their counts fit the budget; when
	// even the rarest is commoner than that, the chunks holding both of the
	// two rarest.
	sort.SliceStable(found, func(i, j int) bool { return found[i].df < found[j].df })
	var match []string
	var sum int64
	for _, t := range found {
		if len(match) > 0 && sum+t.df > budget {
			break
		}
		match = append(match, tsLexeme(t.text))
		sum += t.df
	}
	if found[0].df > budget && len(found) > 1 {
		p.match = tsLexeme(found[0].text) + " & " + tsLexeme(found[1].text)
	} else {
		p.match = strings.Join(match, " | ")
	}
	return p, true
}

// tsLexeme quotes a lexeme for a tsquery's text form.
func tsLexeme(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}

// textSearch runs the full-text half over the datastores ids: up to k
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
		Terms: p.terms, Idfs: p.idfs, Match: p.match,
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
