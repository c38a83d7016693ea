package knowledge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strconv"

	"github.com/google/uuid"
	"github.com/pgvector/pgvector-go"

	"github.com/parleyhq/parley/backend/db/dbq"
)

// Result is one chunk a search found.
type Result struct {
	ChunkID        uuid.UUID
	DatasourceID   uuid.UUID
	DatasourceName string
	Text           string
	Title          string
	Heading        string
	URL            string
	Page           int
	// Score is the fused relevance, 0 to 1.
	Score float64
	// Similarity is the cosine similarity of the chunk's embedding to the
	// query's, when the vector half found it (else 0). Unlike Score, it says
	// how close the best chunk is, not only that it is the best.
	Similarity float64
}

// Source names a result's origin: its URL, else its datasource's name.
func (r Result) Source() string {
	if r.URL != "" {
		return r.URL
	}
	return r.DatasourceName
}

// Query is a search's text and its embeddings, one for each embedder of
// the datastores searched (EmbedQuery).
type Query struct {
	Text string
	// vectors holds the text's embedding by model; a model whose embedder
	// failed is there with nil (its datastores are searched by full text).
	vectors map[string]*pgvector.Vector
}

// Text is a search for text not yet embedded: Search embeds it for each
// embedder among the datastores, inside the caller's transaction. Request
// paths call EmbedQuery first, outside any.
func Text(text string) Query { return Query{Text: nfc(text)} }

// EmbedQuery embeds text for each embedder among datastores, for Search.
// Call it before the transaction Search runs in: a remote embedder
// (OpenAI, Gemini) takes a network round trip, and inside a transaction a
// pooled connection (and in a chat turn the rows it locked) waited on it.
// An embedder that fails (a provider's outage, its rate limit) leaves its
// datastores to the full-text half, with a warning logged: a turn of an
// agent with knowledge answers from what that finds rather than failing
// whole (it was a 500). The error is ctx's, or a datastore's model that is
// not configured.
func (k *Knowledge) EmbedQuery(ctx context.Context, datastores []dbq.Datastore, text string) (Query, error) {
	// Composed, as the chunks' text is (composed).
	text = nfc(text)
	query := Query{Text: text, vectors: map[string]*pgvector.Vector{}}
	for _, d := range datastores {
		if _, done := query.vectors[d.EmbeddingModel]; done {
			continue
		}
		v, err := k.embedQuery(ctx, d.EmbeddingModel, text)
		if err != nil {
			return query, err
		}
		query.vectors[d.EmbeddingModel] = v
	}
	return query, nil
}

// embedQuery is text's embedding by model's embedder; nil, with a warning
// logged, when the embedder fails while ctx lasts.
func (k *Knowledge) embedQuery(ctx context.Context, model, text string) (*pgvector.Vector, error) {
	emb, err := k.Embedder(model)
	if err != nil {
		return nil, err
	}
	vecs, err := emb.Embed(ctx, []string{EmbeddedQuery(text)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("embedding the query: %w", err)
		}
		slog.WarnContext(ctx, "knowledge search: the query's embedding failed; full text only", "model", model, "err", err)
		return nil, nil
	}
	v := pgvector.NewVector(vecs[0])
	return &v, nil
}

// Search runs a hybrid search in q's tenant transaction: the nearest chunks
// by embedding (pgvector HNSW, cosine) and the best full-text matches
// (BM25 over text_postings, fulltext.go), fused by their scores (fuse).
// Scores are 0..1 (1: first in both lists). datasourceIDs, when given,
// restrict the search. query carries its embeddings (EmbedQuery); a model
// it lacks is embedded here.
func (k *Knowledge) Search(ctx context.Context, q *dbq.Queries, org uuid.UUID, datastores []dbq.Datastore, datasourceIDs []uuid.UUID, query Query, topK int) ([]Result, error) {
	if len(datastores) == 0 || topK <= 0 {
		return nil, nil
	}
	l, err := k.lists(ctx, q, org, datastores, datasourceIDs, query, max(topK*4, Candidates))
	if err != nil {
		return nil, err
	}
	out := fuse(l, TextShare)
	if len(out) > topK {
		out = out[:topK]
	}
	return out, k.name(ctx, q, org, out)
}

// ranked holds the candidates of each half of a search, best first: one
// vector list per embedder among the datastores, and the full-text list.
type ranked struct {
	vector [][]Result
	text   []Result
}

// Candidates is how many chunks each half of a search brings at least
// (four times the results asked, if more): the fusion orders them all.
// 40 fused better than 20 on the evaluation (docs/benchmarks.md).
var Candidates = 40

// TextShare is the full-text list's share of a fused score, the vector
// lists' being 1 − TextShare: chosen on the evaluation, where anything
// from 0.5 to 0.7 did about as well (docs/benchmarks.md).
var TextShare = 0.6

// fuse merges the lists by their scores, best first (a convex combination,
// Bruch et al., "An Analysis of Fusion Functions for Hybrid Retrieval",
// 2023): within each list a score (BM25 for the full-text list, cosine
// similarity for a vector list) is scaled to 0..1 from just below the
// list's last candidate to its first, and a chunk scores
// textShare·text + (1 − textShare)·vector, 0 in a list that did not bring
// it. A chunk is in one vector list at most (its datastore's embedder's).
// On the evaluation this beat reciprocal rank fusion, which fused ranks
// alone (hit@5 0.80 → 0.85): how far ahead the first candidate is counts.
func fuse(l ranked, textShare float64) []Result {
	scores := map[uuid.UUID]float64{}
	rows := map[uuid.UUID]Result{}
	add := func(list []Result, score func(Result) float64, share float64) {
		if len(list) == 0 {
			return
		}
		lo, hi := score(list[0]), score(list[0])
		for _, r := range list {
			lo, hi = min(lo, score(r)), max(hi, score(r))
		}
		// The list's last candidate scores above a chunk it did not
		// bring: one step of the list's spread, so it is not 0 itself.
		lo -= (hi - lo) / float64(len(list))
		for _, r := range list {
			n := 1.0
			if hi > lo {
				n = (score(r) - lo) / (hi - lo)
			}
			scores[r.ChunkID] += share * n
			if _, ok := rows[r.ChunkID]; !ok {
				rows[r.ChunkID] = r
			}
		}
	}
	for _, list := range l.vector {
		add(list, func(r Result) float64 { return r.Similarity }, 1-textShare)
	}
	add(l.text, func(r Result) float64 { return r.Score }, textShare)
	out := make([]Result, 0, len(rows))
	for id, r := range rows {
		r.Score = min(scores[id], 1)
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].ChunkID.String() < out[j].ChunkID.String()
	})
	return out
}

// MaxEmbeddedQuery bounds, in bytes, the part of a query the vector half
// embeds. A chat message may hold 32,000 characters (Query's 10,000), and
// an embedder's input is bounded: OpenAI's text-embedding-3 models refuse
// more than 8,191 tokens, and a 32,000-character message can be 16,000 of
// them: the turn failed as a 500 before the model was asked. A token of a
// byte-level tokenizer is at least a byte, so 8,000 bytes always pass; the
// full-text half reads the query whole.
const MaxEmbeddedQuery = 8000

// EmbeddedQuery is what the vector half embeds of query: its first
// MaxEmbeddedQuery bytes, cut between characters.
func EmbeddedQuery(query string) string { return clip(query, MaxEmbeddedQuery) }

// lists runs both halves of a search, each for up to candidates chunks.
func (k *Knowledge) lists(ctx context.Context, q *dbq.Queries, org uuid.UUID, datastores []dbq.Datastore, datasourceIDs []uuid.UUID, query Query, candidates int) (ranked, error) {
	var l ranked
	if datasourceIDs == nil {
		datasourceIDs = []uuid.UUID{}
	}
	// Vector half: one search per embedder among the datastores.
	byModel := map[string][]uuid.UUID{}
	dims := map[string]int{}
	var models []string
	for _, d := range datastores {
		if byModel[d.EmbeddingModel] == nil {
			models = append(models, d.EmbeddingModel)
		}
		byModel[d.EmbeddingModel] = append(byModel[d.EmbeddingModel], d.ID)
		dims[d.EmbeddingModel] = int(d.EmbeddingDim)
	}
	if err := q.TuneVectorSearch(ctx, strconv.Itoa(min(max(candidates*2, k.EfSearch), 1000))); err != nil {
		return l, err
	}
	for _, model := range models {
		ids := byModel[model]
		v, embedded := query.vectors[model]
		if !embedded {
			var err error
			if v, err = k.embedQuery(ctx, model, query.Text); err != nil {
				return l, err
			}
		}
		if v == nil {
			continue // the embedder failed: full text only
		}
		rows, err := k.vectorSearch(ctx, q, dims[model], dbq.SearchVector512Params{
			Query: v, OrgID: org, DatastoreIds: ids, DatasourceIds: datasourceIDs, EmbeddingModel: model, ExactBelow: k.ExactBelow, ExactMax: k.ExactMax, ExactRatio: k.ExactRatio, K: int32(candidates),
		})
		if err != nil {
			return l, err
		}
		sort.SliceStable(rows, func(i, j int) bool { return rows[i].Distance < rows[j].Distance }) // relaxed order
		list := make([]Result, len(rows))
		for i, r := range rows {
			r.Result.Similarity = 1 - r.Distance
			list[i] = r.Result
		}
		l.vector = append(l.vector, list)
	}

	// Full-text half.
	var ids []uuid.UUID
	for _, d := range datastores {
		ids = append(ids, d.ID)
	}
	text, err := k.textSearch(ctx, q, org, ids, datasourceIDs, query.Text, candidates)
	if err != nil {
		return l, err
	}
	l.text = text
	return l, nil
}

type vectorRow struct {
	Result
	Distance float64
}

// vectorSearch runs the query of the datastore's dimension: each has its
// own partial HNSW index, which a query must name by its exact expression.
func (k *Knowledge) vectorSearch(ctx context.Context, q *dbq.Queries, dim int, p dbq.SearchVector512Params) ([]vectorRow, error) {
	var out []vectorRow
	conv := func(id, ds uuid.UUID, text, title, heading, url string, page int32, dist float64) {
		out = append(out, vectorRow{Result{ChunkID: id, DatasourceID: ds, Text: text, Title: title, Heading: heading, URL: url, Page: int(page)}, dist})
	}
	switch dim {
	case 512:
		rows, err := q.SearchVector512(ctx, p)
		for _, r := range rows {
			conv(r.ID, r.DatasourceID, r.Text, r.Title, r.Heading, r.Url, r.Page, r.Distance)
		}
		return out, err
	case 768:
		rows, err := q.SearchVector768(ctx, dbq.SearchVector768Params(p))
		for _, r := range rows {
			conv(r.ID, r.DatasourceID, r.Text, r.Title, r.Heading, r.Url, r.Page, r.Distance)
		}
		return out, err
	case 1536:
		rows, err := q.SearchVector1536(ctx, dbq.SearchVector1536Params(p))
		for _, r := range rows {
			conv(r.ID, r.DatasourceID, r.Text, r.Title, r.Heading, r.Url, r.Page, r.Distance)
		}
		return out, err
	}
	return nil, fmt.Errorf("no vector index for dimension %d", dim)
}

// name fills each result's datasource name (and URL for Q&A sources).
func (k *Knowledge) name(ctx context.Context, q *dbq.Queries, org uuid.UUID, rs []Result) error {
	if len(rs) == 0 {
		return nil
	}
	seen := map[uuid.UUID]bool{}
	var ids []uuid.UUID
	for _, r := range rs {
		if !seen[r.DatasourceID] {
			seen[r.DatasourceID] = true
			ids = append(ids, r.DatasourceID)
		}
	}
	rows, err := q.DatasourceNames(ctx, dbq.DatasourceNamesParams{OrgID: org, Ids: ids})
	if err != nil {
		return err
	}
	names := map[uuid.UUID]string{}
	for _, r := range rows {
		names[r.ID] = r.Name
	}
	for i := range rs {
		rs[i].DatasourceName = names[rs[i].DatasourceID]
	}
	return nil
}

// configOf reads a datasource's config column.
func configOf(raw []byte) datasourceConfig {
	var c datasourceConfig
	_ = json.Unmarshal(raw, &c)
	return c
}

// datasourceConfig is what a datasource keeps beside its content.
type datasourceConfig struct {
	URL       string `json:"url,omitempty"`
	MaxPages  int    `json:"maxPages,omitempty"`
	Question  string `json:"question,omitempty"`
	Answer    string `json:"answer,omitempty"`
	SourceURL string `json:"sourceUrl,omitempty"`
	FileName  string `json:"fileName,omitempty"`
}
