package knowledge

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// The query-expansion experiment of docs/benchmarks.md ("Expanding the
// question from its first results", issue 12): pseudo-relevance feedback
// (RM3, Abdul-Jaleel et al., "UMass at TREC 2004") on the full-text half.
// The search's first fused results are taken as relevant, the terms they
// weigh most are added to the question's, and the full-text half is run
// again with the weighted terms. BM25 is computed here, in Go, from the
// chunks' tsvectors (the same terms, places and lengths text_postings
// holds), so that terms can weigh other than 1. Run with PARLEY_EVAL_PRF=1.

type prfChunk struct {
	tf     map[string]float64 // term -> places (title places count TitleBoost more)
	length float64
}

type prfIndex struct {
	chunks map[uuid.UUID]prfChunk
	df     map[string]float64
	avg    float64
	rows   map[uuid.UUID]Result
}

func prfLoad(t *testing.T, store *db.Store, org uuid.UUID, ds dbq.Datastore) prfIndex {
	t.Helper()
	ctx := context.Background()
	ix := prfIndex{chunks: map[uuid.UUID]prfChunk{}, df: map[string]float64{}, rows: map[uuid.UUID]Result{}}
	tx, err := store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", org.String())
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.tokens, u.lexeme, cardinality(u.positions), 'A' = ANY (u.weights)
		FROM chunks c CROSS JOIN LATERAL unnest(c.tsv) AS u(lexeme, positions, weights)
		WHERE c.datastore_id = $1 AND c.visible`, ds.ID)
	require.NoError(t, err)
	for rows.Next() {
		var (
			id, src              uuid.UUID
			text, title, heading string
			tokens, places       int32
			lexeme               string
			inTitle              bool
		)
		require.NoError(t, rows.Scan(&id, &src, &text, &title, &heading, &tokens, &lexeme, &places, &inTitle))
		c, ok := ix.chunks[id]
		if !ok {
			c = prfChunk{tf: map[string]float64{}, length: float64(tokens)}
			ix.rows[id] = Result{ChunkID: id, DatasourceID: src, Text: text, Title: title, Heading: heading}
		}
		tf := float64(places)
		if inTitle {
			tf += BM25.TitleBoost
		}
		c.tf[lexeme] = tf
		ix.chunks[id] = c
		ix.df[lexeme]++
	}
	require.NoError(t, rows.Err())
	for _, c := range ix.chunks {
		ix.avg += c.length
	}
	ix.avg = max(ix.avg/float64(len(ix.chunks)), 1)
	return ix
}

func (ix prfIndex) idf(term string) float64 {
	n, df := float64(len(ix.chunks)), ix.df[term]
	return math.Log(1 + (n-df+0.5)/(df+0.5))
}

// bm25 ranks every chunk holding a term by BM25 with the terms' weights.
func (ix prfIndex) bm25(weights map[string]float64, limit int) []Result {
	var out []Result
	for id, c := range ix.chunks {
		s := 0.0
		for term, w := range weights {
			tf := c.tf[term]
			if tf == 0 {
				continue
			}
			s += w * ix.idf(term) * tf * (BM25.K1 + 1) / (tf + BM25.K1*(1-BM25.B+BM25.B*c.length/ix.avg))
		}
		if s > 0 {
			r := ix.rows[id]
			r.Score = s
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].ChunkID.String() < out[j].ChunkID.String()
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// expand is RM3: the feedback chunks' terms, each weighing the sum over
// the chunks of the chunk's score times the term's share of the chunk,
// times its idf (so the datastore's common words do not lead); the terms best
// weighed, at most n, normalised to sum 1 and mixed with the question's
// (each 1/len) at lambda.
func (ix prfIndex) expand(query []string, feedback []Result, n int, lambda float64) map[string]float64 {
	w := map[string]float64{}
	for _, r := range feedback {
		c := ix.chunks[r.ChunkID]
		total := 0.0
		for _, tf := range c.tf {
			total += tf
		}
		for term, tf := range c.tf {
			w[term] += r.Score * tf / total * ix.idf(term)
		}
	}
	terms := make([]string, 0, len(w))
	for term := range w {
		terms = append(terms, term)
	}
	sort.Slice(terms, func(i, j int) bool {
		return cmp.Or(cmp.Compare(w[terms[j]], w[terms[i]]), strings.Compare(terms[i], terms[j])) < 0
	})
	if len(terms) > n {
		terms = terms[:n]
	}
	sum := 0.0
	for _, term := range terms {
		sum += w[term]
	}
	out := map[string]float64{}
	for _, q := range query {
		out[q] += (1 - lambda) / float64(len(query))
	}
	for _, term := range terms {
		out[term] += lambda * w[term] / sum
	}
	return out
}

func TestEvalPRF(t *testing.T) {
	if os.Getenv("PARLEY_EVAL_PRF") == "" {
		t.Skip("the query-expansion experiment: PARLEY_EVAL_PRF=1")
	}
	docs := loadEval(t)
	ctx := context.Background()
	k, org, neural := newEval(t)
	store := k.Store

	type variant struct {
		name           string
		docs, terms    int
		lambda, share2 float64 // share2 > 0: a third list (the expanded text) beside the first two
		fromText       bool    // feedback from the text list instead of the fused one
	}
	variants := []variant{{name: "go bm25, no expansion"}}
	for _, d := range []int{3, 5} {
		for _, n := range []int{10, 20} {
			for _, l := range []float64{0.3, 0.5} {
				variants = append(variants, variant{name: fmt.Sprintf("rm3 fused top %d, %d terms, λ %.1f", d, n, l), docs: d, terms: n, lambda: l})
				variants = append(variants, variant{name: fmt.Sprintf("rm3 text top %d, %d terms, λ %.1f", d, n, l), docs: d, terms: n, lambda: l, fromText: true})
			}
		}
	}
	for _, s := range []float64{0.2, 0.4} {
		variants = append(variants, variant{name: fmt.Sprintf("expanded text as a third list, share %.1f (fused top 3, 10 terms)", s), docs: 3, terms: 10, lambda: 1, share2: s})
	}
	names := []string{"use-lite hybrid (the search)"}
	for _, v := range variants {
		names = append(names, v.name)
	}
	scores := map[string]map[string]*evalScore{} // method -> doc -> score
	all := map[string]*evalScore{}
	for _, n := range names {
		scores[n], all[n] = map[string]*evalScore{}, &evalScore{}
	}
	for _, d := range docs {
		ds := ingestEval(t, k, org, d, neural)
		ix := prfLoad(t, store, org, ds.store)
		for _, n := range names {
			scores[n][d.Name] = &evalScore{}
		}
		require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
			for _, qu := range d.Questions {
				holds := answerHolders(ds.chunks, qu.A)
				rank := func(rs []Result) int {
					for r, res := range rs {
						if r >= 10 {
							break
						}
						if holds[res.ChunkID] {
							return r
						}
					}
					return -1
				}
				l, err := k.lists(ctx, q, org, []dbq.Datastore{ds.store}, nil, Text(qu.Q), Candidates)
				if err != nil {
					return err
				}
				base := fuse(l, TextShare)
				r := rank(base)
				scores["use-lite hybrid (the search)"][d.Name].add(r, qu.Q)
				all["use-lite hybrid (the search)"].add(r, qu.Q)
				var qterms []string
				if err := store.Pool.QueryRow(ctx, "SELECT coalesce(tsvector_to_array(to_tsvector('english', $1)), '{}')", qu.Q).Scan(&qterms); err != nil {
					return err
				}
				for _, v := range variants {
					var text []Result
					switch {
					case v.docs == 0:
						w := map[string]float64{}
						for _, term := range qterms {
							w[term] = 1
						}
						text = ix.bm25(w, Candidates)
						l2 := ranked{vector: l.vector, text: text}
						rk := rank(fuse(l2, TextShare))
						scores[v.name][d.Name].add(rk, qu.Q)
						all[v.name].add(rk, qu.Q)
						continue
					}
					fb := base
					if v.fromText {
						fb = l.text
					}
					fb = fb[:min(v.docs, len(fb))]
					w := ix.expand(qterms, fb, v.terms, v.lambda)
					text = ix.bm25(w, Candidates)
					var out []Result
					if v.share2 > 0 {
						// Three lists: vector, text, expanded text.
						a := fuse(ranked{text: l.text}, 1)
						b := fuse(ranked{text: text}, 1)
						c := fuse(ranked{vector: l.vector}, 0)
						sum := map[uuid.UUID]float64{}
						rows := map[uuid.UUID]Result{}
						for _, x := range []struct {
							rs []Result
							w  float64
						}{{a, TextShare * (1 - v.share2)}, {b, TextShare * v.share2}, {c, 1 - TextShare}} {
							for _, r := range x.rs {
								sum[r.ChunkID] += x.w * r.Score
								rows[r.ChunkID] = r
							}
						}
						for id, r := range rows {
							r.Score = sum[id]
							out = append(out, r)
						}
						sort.Slice(out, func(i, j int) bool {
							if out[i].Score != out[j].Score {
								return out[i].Score > out[j].Score
							}
							return out[i].ChunkID.String() < out[j].ChunkID.String()
						})
					} else {
						out = fuse(ranked{vector: l.vector, text: text}, TextShare)
					}
					rk := rank(out)
					scores[v.name][d.Name].add(rk, qu.Q)
					all[v.name].add(rk, qu.Q)
				}
			}
			return nil
		}))
	}
	fmt.Println("\n" + evalTable(docs, names, scores, all))
}
