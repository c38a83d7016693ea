package knowledge

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
)

// The BM25 sweep (PARLEY_EVAL_SWEEP=1 make eval-knowledge): the full-text
// half's parameters and the fusion's text weight, tried on the same
// ingested documents; what chose knowledge.BM25 (with reciprocal rank
// fusion, before the score fusion) and can check TextShare.

type sweepSetting struct {
	bm25  BM25Params
	share float64
}

func (s sweepSetting) String() string {
	return fmt.Sprintf("k1 %.1f, b %.2f, title boost %.0f, text share %.2f", s.bm25.K1, s.bm25.B, s.bm25.TitleBoost, s.share)
}

func sweepSettings() []sweepSetting {
	var out []sweepSetting
	for _, k1 := range []float64{0.9, 1.2, 1.6} {
		for _, b := range []float64{0.4, 0.75, 0.9} {
			for _, boost := range []float64{0, 2, 5} {
				for _, w := range []float64{0.5, 0.6, 0.7} {
					out = append(out, sweepSetting{BM25Params{K1: k1, B: b, TitleBoost: boost, Budget: BM25.Budget}, w})
				}
			}
		}
	}
	return out
}

// sweepScores: setting -> "text" or "hybrid" -> score over every document.
type sweepScores map[sweepSetting]map[string]*evalScore

// sweep scores every setting on one document's datastore (the vector list
// is the default embedder's, searched once per question).
func (s sweepScores) sweep(t *testing.T, k *Knowledge, org uuid.UUID, store dbq.Datastore, d evalDoc, holders []map[uuid.UUID]bool) {
	if os.Getenv("PARLEY_EVAL_SWEEP") == "" {
		return
	}
	ctx := context.Background()
	saved := BM25
	defer func() { BM25 = saved }()
	rank := func(list []Result, i int) int {
		for r, res := range list {
			if r >= 10 {
				break
			}
			if holders[i][res.ChunkID] {
				return r
			}
		}
		return -1
	}
	require.NoError(t, k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		lists := make([]ranked, len(d.Questions))
		for i, qu := range d.Questions {
			l, err := k.lists(ctx, q, org, []dbq.Datastore{store}, nil, Text(qu.Q), Candidates)
			if err != nil {
				return err
			}
			lists[i] = l
		}
		for _, set := range sweepSettings() {
			if s[set] == nil {
				s[set] = map[string]*evalScore{"text": {}, "hybrid": {}}
			}
			BM25 = set.bm25
			for i, qu := range d.Questions {
				text, err := k.textSearch(ctx, q, org, []uuid.UUID{store.ID}, nil, qu.Q, Candidates)
				if err != nil {
					return err
				}
				s[set]["text"].add(rank(text, i), qu.Q)
				s[set]["hybrid"].add(rank(fuse(ranked{vector: lists[i].vector, text: text}, set.share), i), qu.Q)
			}
		}
		return nil
	}))
}

// print writes the settings' table, best hybrid MRR first.
func (s sweepScores) print() {
	if len(s) == 0 {
		return
	}
	sets := make([]sweepSetting, 0, len(s))
	for set := range s {
		sets = append(sets, set)
	}
	mrr := func(set sweepSetting, m string) float64 { return s[set][m].rr / float64(s[set][m].n) }
	sort.Slice(sets, func(i, j int) bool { return mrr(sets[i], "hybrid") > mrr(sets[j], "hybrid") })
	var b strings.Builder
	b.WriteString("\n| setting | full text hit@1 | hit@5 | MRR | hybrid hit@1 | hit@5 | MRR |\n|---|---|---|---|---|---|---|\n")
	for _, set := range sets {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", set, s[set]["text"].cells(), s[set]["hybrid"].cells())
	}
	fmt.Println(b.String())
}
