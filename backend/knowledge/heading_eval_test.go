package knowledge

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
)

// TestEvalHeadingMix is issue 12's heading experiment: an FAQ's headings are
// questions, a manual's say what a section is about, and a chunk's vector
// (its heading path and its ~300 tokens embedded as one text) carries them
// only as a few words among many. Here the vector half ranks every chunk
// exactly by its own vector mixed with its heading path's vector, at
// several weights, then fuses with the full-text half as the search does.
// Run with PARLEY_EVAL_HEADING=1 (about two minutes).
func TestEvalHeadingMix(t *testing.T) {
	if os.Getenv("PARLEY_EVAL_HEADING") == "" {
		t.Skip("the heading-vector experiment: PARLEY_EVAL_HEADING=1")
	}
	docs := loadEval(t)
	ctx := context.Background()
	k, org, neural := newEval(t)

	type mix struct {
		name string
		beta float64
		norm bool // the mixed vector normalized (one stored vector), else a sum of similarities
		max  bool // the better of the two similarities
	}
	mixes := []mix{{name: "exact, chunk vector only"}}
	for _, b := range []float64{0.15, 0.3, 0.5, 0.75, 1} {
		mixes = append(mixes, mix{name: fmt.Sprintf("one vector, chunk + %.2f heading", b), beta: b, norm: true})
		mixes = append(mixes, mix{name: fmt.Sprintf("sum, chunk + %.2f heading", b), beta: b})
	}
	mixes = append(mixes, mix{name: "max of chunk and 0.9 × heading", beta: 0.9, max: true})
	names := []string{"use-lite hybrid (the search, HNSW)"}
	for _, m := range mixes {
		names = append(names, m.name)
	}
	scores := map[string]map[string]*evalScore{}
	all := map[string]*evalScore{}
	for _, n := range names {
		scores[n] = map[string]*evalScore{}
		all[n] = &evalScore{}
	}
	for _, d := range docs {
		ds := ingestEval(t, k, org, d, neural)
		// Each chunk's heading path, embedded once per distinct path.
		paths := map[string][]float32{}
		for _, c := range ds.chunks {
			paths[headingPath(c)] = nil
		}
		texts := make([]string, 0, len(paths))
		for p := range paths {
			if p == "" {
				continue // no heading: the chunk's own vector stands for it
			}
			texts = append(texts, p)
		}
		sort.Strings(texts)
		vecs, err := neural.Embed(ctx, texts)
		require.NoError(t, err)
		for i, p := range texts {
			paths[p] = vecs[i]
		}
		for _, n := range names {
			scores[n][d.Name] = &evalScore{}
		}
		require.NoError(t, k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
			for _, qu := range d.Questions {
				holders := answerHolders(ds.chunks, qu.A)
				l, err := k.lists(ctx, q, org, []dbq.Datastore{ds.store}, nil, Text(qu.Q), Candidates)
				if err != nil {
					return err
				}
				qv, err := neural.Embed(ctx, []string{qu.Q})
				if err != nil {
					return err
				}
				record := func(name string, res []Result) {
					rank := -1
					for r, x := range res {
						if r >= 10 {
							break
						}
						if holders[x.ChunkID] {
							rank = r
							break
						}
					}
					scores[name][d.Name].add(rank, qu.Q)
					all[name].add(rank, qu.Q)
				}
				record(names[0], fuse(l, TextShare))
				for _, m := range mixes {
					list := make([]Result, 0, len(ds.chunks))
					for _, c := range ds.chunks {
						h := paths[headingPath(c)]
						if h == nil {
							h = c.vec.Slice()
						}
						cs, hs := dot(qv[0], c.vec.Slice()), dot(qv[0], h)
						var s float64
						switch {
						case m.max:
							s = max(cs, m.beta*hs)
						case m.norm:
							// cos(q, v + βh) with |v| = |h| = 1.
							s = (cs + m.beta*hs) / math.Sqrt(1+m.beta*m.beta+2*m.beta*dot(c.vec.Slice(), h))
						default:
							s = cs + m.beta*hs
						}
						list = append(list, Result{ChunkID: c.id, Similarity: s})
					}
					sort.Slice(list, func(i, j int) bool { return list[i].Similarity > list[j].Similarity })
					list = list[:min(len(list), Candidates)]
					record(m.name, fuse(ranked{vector: [][]Result{list}, text: l.text}, TextShare))
				}
			}
			return nil
		}))
	}
	fmt.Println(evalTable(docs, names, scores, all))
	require.Greater(t, all[names[0]].hit5, all[names[0]].n/2)
}

// headingPath is what a chunk's vector embeds before its text.
func headingPath(c evalChunk) string {
	return EmbedText(c.title, c.heading, "")
}

func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}
