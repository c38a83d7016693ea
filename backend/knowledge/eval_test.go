package knowledge

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// The retrieval evaluation (docs/benchmarks.md#retrieval-quality): real
// public documents in testdata/eval/<doc>/, each with questions.txt, the
// questions users would ask and, for each, a short exact passage of the
// document that answers it. A chunk holds the answer when its text contains
// the passage (whitespace aside), whatever the chunking.
//
// TestEvalData checks the set itself on every run: each passage is found
// exactly once in its document as extracted. TestEvalRetrieval ingests every
// document through Knowledge.Ingest with each offline embedder into a real
// Postgres and asks every question through the search path; it embeds with
// the neural model, so it runs only with PARLEY_EVAL=1 (`make eval-knowledge`).

const evalDir = "testdata/eval"

type evalQuestion struct {
	Q, A string
	Line int
}

type evalDoc struct {
	Name      string
	Files     map[string][]byte // file name -> bytes
	Questions []evalQuestion
}

// notContent are the files of a document's folder that are not the document.
func notContent(name string) bool {
	return name == "questions.txt" || name == "NOTICE" || strings.HasPrefix(name, "COPYRIGHT") || strings.HasPrefix(name, "LICENSE")
}

func loadEval(t testing.TB) []evalDoc {
	t.Helper()
	dirs, err := os.ReadDir(evalDir)
	require.NoError(t, err)
	var out []evalDoc
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		doc := evalDoc{Name: d.Name(), Files: map[string][]byte{}}
		dir := filepath.Join(evalDir, d.Name())
		files, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, f := range files {
			if notContent(f.Name()) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, f.Name()))
			require.NoError(t, err)
			doc.Files[f.Name()] = b
		}
		doc.Questions = readQuestions(t, filepath.Join(dir, "questions.txt"))
		out = append(out, doc)
	}
	return out
}

// readQuestions reads "q: ..." lines each followed by an "a: ..." line;
// blank lines and lines starting with # are ignored.
func readQuestions(t testing.TB, path string) []evalQuestion {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []evalQuestion
	sc := bufio.NewScanner(f)
	n := 0
	var cur *evalQuestion
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "q: "):
			require.Nil(t, cur, "%s:%d: a question without an answer before it", path, n)
			cur = &evalQuestion{Q: strings.TrimPrefix(line, "q: "), Line: n}
		case strings.HasPrefix(line, "a: "):
			require.NotNil(t, cur, "%s:%d: an answer without a question", path, n)
			cur.A = strings.TrimPrefix(line, "a: ")
			out = append(out, *cur)
			cur = nil
		default:
			t.Fatalf("%s:%d: want q: or a:, got %q", path, n, line)
		}
	}
	require.NoError(t, sc.Err())
	require.Nil(t, cur, "%s: the last question has no answer", path)
	return out
}

// norm collapses whitespace, so that a passage matches across line breaks.
func norm(s string) string { return strings.Join(strings.Fields(s), " ") }

// extracted is a document's text as ingestion sees it.
func extracted(t testing.TB, name string, b []byte) string {
	t.Helper()
	d, _, err := Extract(context.Background(), name, b, "")
	require.NoError(t, err, name)
	var sb strings.Builder
	for _, s := range d.Sections {
		sb.WriteString(s.Text)
		sb.WriteString("\n")
	}
	return norm(sb.String())
}

func TestEvalData(t *testing.T) {
	t.Parallel()
	docs := loadEval(t)
	require.GreaterOrEqual(t, len(docs), 3)
	total := 0
	for _, d := range docs {
		require.FileExists(t, filepath.Join(evalDir, d.Name, "NOTICE"), "every document keeps its licence notice")
		var texts []string
		for name, b := range d.Files {
			texts = append(texts, extracted(t, name, b))
		}
		if dump := os.Getenv("PARLEY_EVAL_DUMP"); dump != "" { // the text to take passages from
			var sb strings.Builder
			for name, b := range d.Files {
				doc, _, err := Extract(context.Background(), name, b, "")
				require.NoError(t, err)
				for _, s := range doc.Sections {
					fmt.Fprintf(&sb, "\n=== %s | %s\n%s", name, s.Heading, s.Text)
				}
			}
			require.NoError(t, os.WriteFile(filepath.Join(dump, d.Name+".txt"), []byte(sb.String()), 0o644))
			continue
		}
		seenQ := map[string]bool{}
		for _, q := range d.Questions {
			require.False(t, seenQ[q.Q], "%s:%d: question asked twice", d.Name, q.Line)
			seenQ[q.Q] = true
			a := norm(q.A)
			require.GreaterOrEqual(t, len(a), 12, "%s:%d: the passage %q is too short to be unique", d.Name, q.Line, q.A)
			count := 0
			for _, tx := range texts {
				count += strings.Count(tx, a)
			}
			require.Equal(t, 1, count, "%s:%d: the passage %q must occur once in the document, found %d times", d.Name, q.Line, q.A, count)
		}
		require.GreaterOrEqual(t, len(d.Questions), 30, d.Name)
		total += len(d.Questions)
	}
	require.GreaterOrEqual(t, total, 100)
}

// evalMethod is one way of searching.
type evalMethod struct {
	name  string
	model string // the embedder of the datastore searched
	pick  func(l ranked) []Result
}

func vectorOnly(l ranked) []Result {
	if len(l.vector) == 0 {
		return nil
	}
	return l.vector[0]
}

func textOnly(l ranked) []Result { return l.text }

func hybrid(l ranked) []Result { return fuse(l, TextShare) }

type evalScore struct {
	n, hit1, hit5 int
	rr            float64
	misses        []string
}

func (s *evalScore) add(rank int, q string) { // rank 0-based, -1 not found in the top 10
	s.n++
	if rank == 0 {
		s.hit1++
	}
	if rank >= 0 && rank < 5 {
		s.hit5++
	} else {
		s.misses = append(s.misses, fmt.Sprintf("%s (rank %d)", q, rank+1))
	}
	if rank >= 0 {
		s.rr += 1 / float64(rank+1)
	}
}

func (s *evalScore) cells() string {
	if s.n == 0 {
		return "– | – | –"
	}
	return fmt.Sprintf("%.2f | %.2f | %.2f", float64(s.hit1)/float64(s.n), float64(s.hit5)/float64(s.n), s.rr/float64(s.n))
}

// TestEvalRetrieval is the evaluation: hit@1, hit@5 and MRR (over the top
// 10) per document and method, printed as a Markdown table.
// PARLEY_EVAL_CHUNK=max/overlap changes the chunk sizes (default: the
// package's), PARLEY_EVAL_MISSES=1 prints the questions missed.
func TestEvalRetrieval(t *testing.T) {
	if os.Getenv("PARLEY_EVAL") == "" {
		t.Skip("the retrieval evaluation embeds with the neural model (about a minute): PARLEY_EVAL=1 or make eval-knowledge")
	}
	docs := loadEval(t)
	ctx := context.Background()
	k, org, neural := newEval(t)
	store := k.Store
	var err error
	if c := os.Getenv("PARLEY_EVAL_CHUNK"); c != "" {
		a, b, _ := strings.Cut(c, "/")
		k.Chunking.MaxTokens, err = strconv.Atoi(a)
		require.NoError(t, err)
		k.Chunking.OverlapTokens, err = strconv.Atoi(b)
		require.NoError(t, err)
	}
	embedders := []embed.Embedder{embed.Lexical{}, neural}
	methods := []evalMethod{
		{"lexical hybrid", embed.Lexical{}.Model(), hybrid},
		{"lexical vector", embed.Lexical{}.Model(), vectorOnly},
		{"full text", embed.Lexical{}.Model(), textOnly},
		{"use-lite vector", neural.Model(), vectorOnly},
		{"use-lite hybrid", neural.Model(), hybrid},
	}
	rr := newRerankEval(neural) // rerank_eval_test.go
	methods = append(methods, rr.methods()...)
	// Other fusions on the same lists: the full-text share of the score
	// fusion, and reciprocal rank fusion as the search did before
	// (fusion_eval_test.go), with the full-text list weighing 1 or 2.
	for _, m := range []string{"lexical", "use-lite"} {
		model := embed.Lexical{}.Model()
		if m == "use-lite" {
			model = neural.Model()
		}
		for _, a := range []float64{0.5, 0.7} {
			methods = append(methods, evalMethod{fmt.Sprintf("%s hybrid, text share %.2f", m, a), model, func(l ranked) []Result { return fuse(l, a) }})
		}
		for _, w := range []float64{1, 2} {
			methods = append(methods, evalMethod{fmt.Sprintf("%s hybrid, rrf, text weight %.0f", m, w), model, func(l ranked) []Result { return fuseRanks(l, w) }})
		}
	}
	scores := map[string]map[string]*evalScore{} // method -> doc -> score
	all := map[string]*evalScore{}
	for _, m := range methods {
		scores[m.name] = map[string]*evalScore{}
		all[m.name] = &evalScore{}
	}
	chunkCounts := map[string]int{}
	sweep := sweepScores{}
	ingestTime := map[string]time.Duration{}
	for _, d := range docs {
		stores := map[string]dbq.Datastore{}
		for _, emb := range embedders {
			ds := ingestEval(t, k, org, d, emb)
			stores[emb.Model()] = ds.store
			chunkCounts[d.Name] = len(ds.chunks)
			rr.ingested(t, emb, ds.chunks)
			ingestTime[emb.Model()] += ds.took
			// Which chunks hold each answer.
			holders := make([]map[uuid.UUID]bool, len(d.Questions))
			for i, q := range d.Questions {
				holders[i] = answerHolders(ds.chunks, q.A)
				require.NotEmpty(t, holders[i], "%s:%d: no chunk holds %q", d.Name, q.Line, q.A)
			}
			if emb.Model() == neural.Model() {
				sweep.sweep(t, k, org, ds.store, d, holders)
			}
			for _, m := range methods {
				if m.model != emb.Model() {
					continue
				}
				s := &evalScore{}
				scores[m.name][d.Name] = s
				require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
					for i, qu := range d.Questions {
						l, err := k.lists(ctx, q, org, []dbq.Datastore{ds.store}, nil, Text(qu.Q), cmp.Or(rr.candidates[m.name], Candidates))
						if err != nil {
							return err
						}
						if err := rr.question(ctx, m.name, qu.Q, holders[i]); err != nil {
							return err
						}
						rank := -1
						for r, res := range m.pick(l) {
							if r >= 10 {
								break
							}
							if holders[i][res.ChunkID] {
								rank = r
								break
							}
						}
						s.add(rank, qu.Q)
						all[m.name].add(rank, qu.Q)
					}
					return nil
				}))
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chunking %d/%d tokens; ", k.Chunking.MaxTokens, k.Chunking.OverlapTokens)
	for _, d := range docs {
		fmt.Fprintf(&b, "%s: %d questions, %d chunks; ", d.Name, len(d.Questions), chunkCounts[d.Name])
	}
	for _, e := range embedders {
		fmt.Fprintf(&b, "ingestion with %s %s; ", e.Model(), ingestTime[e.Model()].Round(100*time.Millisecond))
	}
	b.WriteString("\n\n")
	names := make([]string, len(methods))
	for i, m := range methods {
		names[i] = m.name
	}
	b.WriteString(evalTable(docs, names, scores, all))
	if os.Getenv("PARLEY_EVAL_MISSES") != "" {
		for _, m := range methods {
			fmt.Fprintf(&b, "\n%s misses (%d):\n", m.name, len(all[m.name].misses))
			for _, x := range all[m.name].misses {
				fmt.Fprintf(&b, "  %s\n", x)
			}
		}
	}
	fmt.Println(b.String())
	sweep.print()
	if out := os.Getenv("PARLEY_EVAL_JSON"); out != "" {
		js, err := json.Marshal(scores)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(out, js, 0o644))
	}
	// A floor, so that the evaluation fails when retrieval breaks outright;
	// the figures themselves are read from the table.
	require.Greater(t, all["use-lite hybrid"].hit5, all["use-lite hybrid"].n/2, "use-lite hybrid finds fewer than half the answers in the top 5")
}

// newEval is the evaluation's Knowledge, over a database of its own, with
// the neural embedder as the default and the lexical one beside it, and
// the organisation whose datastores it makes.
func newEval(t *testing.T) (*Knowledge, uuid.UUID, embed.Embedder) {
	t.Helper()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	org, _, err := account.Bootstrap(context.Background(), store, "Eval", "pro")
	require.NoError(t, err)
	neural := embed.NewNeural()
	return New(store, neural, netguard.New(netguard.Config{}), embed.Lexical{}), org, neural
}

// evalTable is the scores of the methods named, per document and over
// all, as a Markdown table.
func evalTable(docs []evalDoc, names []string, scores map[string]map[string]*evalScore, all map[string]*evalScore) string {
	var b strings.Builder
	b.WriteString("| method |")
	for _, d := range docs {
		fmt.Fprintf(&b, " %s hit@1 | hit@5 | MRR |", d.Name)
	}
	b.WriteString(" all hit@1 | hit@5 | MRR |\n|---|")
	for range len(docs) + 1 {
		b.WriteString("---|---|---|")
	}
	b.WriteString("\n")
	for _, n := range names {
		fmt.Fprintf(&b, "| %s |", n)
		for _, d := range docs {
			fmt.Fprintf(&b, " %s |", scores[n][d.Name].cells())
		}
		fmt.Fprintf(&b, " %s |\n", all[n].cells())
	}
	return b.String()
}

type evalChunk struct {
	id   uuid.UUID
	text string // whitespace collapsed
	// As stored, for the reranking experiment.
	raw, title, heading string
	vec                 pgvector.Vector
}

type evalIngested struct {
	store  dbq.Datastore
	chunks []evalChunk
	took   time.Duration
}

// ingestEval makes a datastore of emb holding d's files, each a file
// datasource ingested by Knowledge.Ingest, and returns its chunks.
func ingestEval(t *testing.T, k *Knowledge, org uuid.UUID, d evalDoc, emb embed.Embedder) evalIngested {
	t.Helper()
	ctx := context.Background()
	out := evalIngested{}
	storeID := uuid.New()
	var sources []uuid.UUID
	names := make([]string, 0, len(d.Files))
	for n := range d.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	require.NoError(t, k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		if _, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{OrgID: org, ID: storeID, Name: d.Name + " " + emb.Model(), EmbeddingModel: emb.Model(), EmbeddingDim: int32(emb.Dimension())}); err != nil {
			return err
		}
		for _, n := range names {
			id := uuid.New()
			cfg, _ := json.Marshal(datasourceConfig{FileName: n})
			if _, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: org, ID: id, DatastoreID: storeID, Type: "file", Name: n, Config: cfg, Content: d.Files[n]}); err != nil {
				return err
			}
			sources = append(sources, id)
		}
		return nil
	}))
	start := time.Now()
	for _, id := range sources {
		require.NoError(t, k.Ingest(ctx, org, id))
	}
	out.took = time.Since(start)
	require.NoError(t, k.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		var err error
		if out.store, err = q.GetDatastore(ctx, dbq.GetDatastoreParams{OrgID: org, ID: storeID}); err != nil {
			return err
		}
		return nil
	}))
	tx, err := k.Store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", org.String())
	require.NoError(t, err)
	rows, err := tx.Query(ctx, "SELECT id, text, title, heading, embedding FROM chunks WHERE datastore_id = $1 AND visible ORDER BY datasource_id, position", storeID)
	require.NoError(t, err)
	for rows.Next() {
		var c evalChunk
		require.NoError(t, rows.Scan(&c.id, &c.raw, &c.title, &c.heading, &c.vec))
		c.text = norm(c.raw)
		out.chunks = append(out.chunks, c)
	}
	require.NoError(t, rows.Err())
	return out
}

// answerHolders are the chunks that hold the passage: those containing it
// whole, else (a passage cut by a chunk boundary) those holding its longest
// part, at least half of it.
func answerHolders(chunks []evalChunk, passage string) map[uuid.UUID]bool {
	a := norm(passage)
	out := map[uuid.UUID]bool{}
	for _, c := range chunks {
		if strings.Contains(c.text, a) {
			out[c.id] = true
		}
	}
	if len(out) > 0 {
		return out
	}
	best := 0
	for _, c := range chunks {
		n := 0
		for l := len(a) - 1; l >= len(a)/2; l-- { // the longest prefix or suffix of the passage the chunk holds
			if strings.HasSuffix(c.text, a[:l]) || strings.HasPrefix(c.text, a[len(a)-l:]) {
				n = l
				break
			}
		}
		switch {
		case n > best:
			best = n
			out = map[uuid.UUID]bool{c.id: true}
		case n == best && n > 0:
			out[c.id] = true
		}
	}
	return out
}
