package knowledge

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/embed"
	"github.com/parleyhq/parley/backend/netguard"
)

// BenchmarkIngest: one text datasource of about 63 chunks per op into
// Postgres (HNSW and GIN maintained as rows arrive), with each offline
// embedder.
func BenchmarkIngest(b *testing.B) {
	neural := embed.NewNeural()
	for _, c := range []struct {
		emb        embed.Embedder
		paragraphs int
	}{{embed.Lexical{}, 400}, {neural, 400}} {
		b.Run(c.emb.Model(), func(b *testing.B) {
			env := setupIngestB(b)
			ctx := context.Background()
			k := New(env.store, embed.Lexical{}, netguard.New(netguard.Config{}), c.emb)
			if err := env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
				_, err := q.SetDatastoreEmbedder(ctx, dbq.SetDatastoreEmbedderParams{OrgID: env.org, ID: env.store_, EmbeddingModel: c.emb.Model(), EmbeddingDim: int32(c.emb.Dimension())})
				return err
			}); err != nil {
				b.Fatal(err)
			}
			text := longText(c.paragraphs)
			pieces := Chunk(Markdown(text), DefaultChunkOptions)
			tokens := 0
			for _, p := range pieces {
				tokens += p.Tokens
			}
			var elapsed time.Duration
			for b.Loop() {
				id := uuid.New()
				if err := env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
					_, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: env.org, ID: id, DatastoreID: env.store_, Type: "text", Name: "t", Config: []byte("{}"), Content: []byte(text)})
					return err
				}); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if err := k.Ingest(ctx, env.org, id); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(len(pieces)*b.N)/elapsed.Seconds(), "chunks/s")
			b.ReportMetric(float64(tokens*b.N)/elapsed.Seconds(), "tokens/s")
		})
	}
}

var (
	searchOnce sync.Once
	searchEnv  kenv
	searchErr  error
	queries    []string
)

// vocabulary is a deterministic set of pseudo-words.
func vocabulary(n int, r *rand.Rand) []string {
	syll := []string{"ka", "lo", "mi", "ru", "sen", "ta", "vo", "ne", "pi", "dra", "gu", "el", "an", "or", "is", "qu", "be", "zo"}
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for j := 0; j < 2+r.Intn(3); j++ {
			b.WriteString(syll[r.Intn(len(syll))])
		}
		out[i] = b.String()
	}
	return out
}

// setupSearch loads PARLEY_BENCH_CHUNKS (default 100,000) chunks once for
// the benchmark b: rows first, then the HNSW index built in bulk, as a
// restore would. Their database is b's (dbtest drops it when b ends), so
// the next benchmark to call it, or the next -count run of b, loads its own.
func setupSearch(b *testing.B) kenv {
	searchOnce.Do(func() {
		b.Cleanup(func() { searchOnce, searchEnv, searchErr, queries = sync.Once{}, kenv{}, nil, nil })
		n := 100_000
		if v, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_CHUNKS")); err == nil && v > 0 {
			n = v
		}
		env := setupIngestB(b)
		ctx := context.Background()
		r := rand.New(rand.NewSource(7))
		vocab := vocabulary(3000, r)
		sentence := func(words int) string {
			var s []string
			for i := 0; i < words; i++ {
				s = append(s, vocab[int(float64(len(vocab))*r.Float64()*r.Float64())]) // skewed, like real text
			}
			return strings.Join(s, " ")
		}
		// The chunks' dimension: 512 (the lexical embedder's), or 768 or
		// 1536 (PARLEY_BENCH_DIM: its vectors padded with zeros, so the
		// same neighbours at the cost of the providers' dimensions).
		emb, dim := benchEmbedder()
		if _, err := env.store.Pool.Exec(ctx, fmt.Sprintf("DROP INDEX chunks_embedding_%d", dim)); err != nil {
			searchErr = err
			return
		}
		if err := env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
			_, err := q.SetDatastoreEmbedder(ctx, dbq.SetDatastoreEmbedderParams{OrgID: env.org, ID: env.store_, EmbeddingModel: emb.Model(), EmbeddingDim: int32(dim)})
			return err
		}); err != nil {
			searchErr = err
			return
		}
		// Chunks go round-robin to PARLEY_BENCH_DATASTORES datastores (1 by
		// default; the searches ask the first), in datasources of at most
		// 20,000 chunks (a 20 MiB document's), each published when full, as
		// ingestion publishes one datasource at a time. They go in runs of
		// PARLEY_BENCH_RUN rows (64 by default, ingestion's batch: jobs
		// ingesting side by side interleave their batches so); a run of 1
		// scatters each datastore's rows over every page of the table, the
		// worst layout for reading one datastore's chunks.
		spread, run := 1, 64
		if v, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_DATASTORES")); err == nil && v > 1 {
			spread = v
		}
		if v, err := strconv.Atoi(os.Getenv("PARLEY_BENCH_RUN")); err == nil && v > 0 {
			run = v
		}
		type open struct {
			store, source uuid.UUID
			n             int
			gen           int32
		}
		sources := []*open{{store: env.store_, source: env.ds, gen: 1}}
		newSource := func(q *dbq.Queries, o *open) error {
			o.source, o.n = uuid.New(), 0
			_, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: env.org, ID: o.source, DatastoreID: o.store, Type: "text", Name: "bench", Config: []byte("{}"), Content: []byte{}})
			return err
		}
		publish := func(q *dbq.Queries, o *open) error {
			if err := q.PublishGeneration(ctx, dbq.PublishGenerationParams{OrgID: env.org, DatasourceID: o.source, Generation: o.gen}); err != nil {
				return err
			}
			// Its chunk count, as ingestion records it: the vector search
			// chooses exact or HNSW by it.
			return q.MarkSynced(ctx, dbq.MarkSyncedParams{OrgID: env.org, ID: o.source, Generation: o.gen, ChunkCount: int32(o.n)})
		}
		searchErr = env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
			for range spread - 1 {
				o := &open{store: uuid.New(), gen: 1}
				if _, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{OrgID: env.org, ID: o.store, Name: "bench", EmbeddingModel: emb.Model(), EmbeddingDim: int32(dim)}); err != nil {
					return err
				}
				if err := newSource(q, o); err != nil {
					return err
				}
				sources = append(sources, o)
			}
			return nil
		})
		if searchErr != nil {
			return
		}
		start := time.Now()
		for done := 0; done < n; done += 1000 {
			var texts []string
			for i := done; i < min(done+1000, n); i++ {
				texts = append(texts, sentence(40+r.Intn(40)))
			}
			vecs, _ := emb.Embed(ctx, texts)
			searchErr = env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
				var rows []chunkRow
				for i, tx := range texts {
					o := sources[((done+i)/run)%spread]
					if o.n == 20_000 { // full: what it holds written, then published
						if err := writeChunks(ctx, q, rows); err != nil {
							return err
						}
						rows = rows[:0]
						if err := publish(q, o); err != nil {
							return err
						}
						if err := newSource(q, o); err != nil {
							return err
						}
					}
					o.n++
					v := pgvector.NewVector(vecs[i])
					rows = append(rows, chunkRow{OrgID: env.org, ID: uuid.New(), DatastoreID: o.store, DatasourceID: o.source, Generation: o.gen,
						Position: int32(o.n), Text: tx, Tokens: 60, Embedding: &v, EmbeddingDim: int32(dim)})
				}
				return writeChunks(ctx, q, rows)
			})
			if searchErr != nil {
				return
			}
		}
		searchErr = env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
			for _, o := range sources {
				if err := publish(q, o); err != nil {
					return err
				}
			}
			return nil
		})
		if searchErr != nil {
			return
		}
		loaded := time.Since(start)
		start = time.Now()
		conn, err := env.store.Pool.Acquire(ctx)
		if err != nil {
			searchErr = err
			return
		}
		defer conn.Release()
		// The build runs in memory when the vectors fit in
		// maintenance_work_mem (1 GB: about 400,000 chunks of 512
		// dimensions); 1M chunks want PARLEY_BENCH_MAINTENANCE_WORK_MEM=4GB
		// or more, else pgvector builds on disk, many times slower.
		mem := cmp.Or(os.Getenv("PARLEY_BENCH_MAINTENANCE_WORK_MEM"), "1GB")
		if _, searchErr = conn.Exec(ctx, "SELECT set_config('maintenance_work_mem', $1, false)", mem); searchErr != nil {
			return
		}
		for _, stmt := range []string{
			// As migrations/00003_knowledge.sql makes it.
			fmt.Sprintf("CREATE INDEX chunks_embedding_%[1]d ON chunks USING hnsw ((embedding::vector(%[1]d)) vector_cosine_ops) WHERE embedding_dim = %[1]d", dim),
			"ANALYZE chunks",
		} {
			if _, searchErr = conn.Exec(ctx, stmt); searchErr != nil {
				return
			}
		}
		fmt.Fprintf(os.Stderr, "loaded %d chunks in %v, built the HNSW index in %v\n", n, loaded.Round(time.Second), time.Since(start).Round(time.Second))
		for i := 0; i < 200; i++ {
			queries = append(queries, sentence(3+r.Intn(5)))
		}
		// Warm the caches as a serving instance's would be, with 200 other
		// questions through both halves over every datastore: the measured
		// ones are not among them, so their own pages are not read ahead.
		k := benchKnowledge(env)
		start = time.Now()
		var stores []dbq.Datastore
		if searchErr = env.store.Tenant(ctx, env.org, func(qq *dbq.Queries) error {
			var err error
			stores, err = qq.ListDatastores(ctx, env.org)
			return err
		}); searchErr != nil {
			return
		}
		for i := 0; i < 200; i++ {
			q := sentence(3 + r.Intn(5))
			if searchErr = env.store.Tenant(ctx, env.org, func(qq *dbq.Queries) error {
				_, err := k.Search(ctx, qq, env.org, stores, nil, Text(q), 10)
				return err
			}); searchErr != nil {
				return
			}
		}
		fmt.Fprintf(os.Stderr, "warmed with 200 other questions in %v\n", time.Since(start).Round(time.Millisecond))
		searchEnv = env
	})
	if searchErr != nil {
		b.Fatal(searchErr)
	}
	return searchEnv
}

// benchEmbedder is the searched chunks' embedder: the lexical one, or for
// PARLEY_BENCH_DIM=768 or 1536 its vectors padded to that dimension.
func benchEmbedder() (embed.Embedder, int) {
	switch d := os.Getenv("PARLEY_BENCH_DIM"); d {
	case "", "512":
		return embed.Lexical{}, embed.LexicalDim
	case "768":
		return padded(768), 768
	case "1536":
		return padded(1536), 1536
	default:
		panic("PARLEY_BENCH_DIM is 512, 768 or 1536, not " + d)
	}
}

// benchKnowledge is the searches' Knowledge: the lexical embedder (and the
// padded one of PARLEY_BENCH_DIM), and the exact-search choice
// PARLEY_BENCH_EXACT_BELOW, PARLEY_BENCH_EXACT_MAX and
// PARLEY_BENCH_EXACT_RATIO when set.
func benchKnowledge(env kenv) *Knowledge {
	emb, _ := benchEmbedder()
	k := New(env.store, embed.Lexical{}, netguard.New(netguard.Config{}), emb)
	if v, err := strconv.ParseInt(os.Getenv("PARLEY_BENCH_EXACT_BELOW"), 10, 64); err == nil {
		k.ExactBelow = v
	}
	if v, err := strconv.ParseInt(os.Getenv("PARLEY_BENCH_EXACT_MAX"), 10, 64); err == nil {
		k.ExactMax = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("PARLEY_BENCH_EXACT_RATIO"), 64); err == nil {
		k.ExactRatio = v
	}
	return k
}

// latencies runs search once per iteration, each in its own tenant
// transaction with the next of the queries, and reports p50 and p95.
func latencies(b *testing.B, env kenv, search func(q *dbq.Queries, query string) error) {
	ctx := context.Background()
	var lat []time.Duration
	i := 0
	for b.Loop() {
		query := queries[i%len(queries)]
		i++
		start := time.Now()
		if err := env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error { return search(q, query) }); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	p50, p95 := percentiles(lat)
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p95, "p95-ms")
}

func percentiles(ds []time.Duration) (p50, p95 float64) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000 }
	return at(0.50), at(0.95)
}

// BenchmarkSearch: latency of a top-10 search over the loaded chunks, hybrid
// (vector + full text, fused), the full-text half alone (BM25, its 40
// candidates) and vector only (HNSW), with p50/p95, and the
// HNSW path's recall@10 against exact search. Over one datastore, and, when
// the chunks are spread (PARLEY_BENCH_DATASTORES), over all of them at once
// too: "one" then filters the index to a hundredth of its rows.
func BenchmarkSearch(b *testing.B) {
	env := setupSearch(b)
	ctx := context.Background()
	k := benchKnowledge(env)
	var all []dbq.Datastore
	if err := env.store.Tenant(ctx, env.org, func(q *dbq.Queries) error {
		var err error
		all, err = q.ListDatastores(ctx, env.org)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	scopes := []struct {
		name   string
		stores []dbq.Datastore
	}{{"one", nil}}
	for _, d := range all {
		if d.ID == env.store_ {
			scopes[0].stores = []dbq.Datastore{d}
		}
	}
	if len(all) > 1 {
		scopes = append(scopes, struct {
			name   string
			stores []dbq.Datastore
		}{fmt.Sprintf("all%d", len(all)), all})
	}
	for _, scope := range scopes {
		ids := make([]uuid.UUID, len(scope.stores))
		for i, d := range scope.stores {
			ids[i] = d.ID
		}
		b.Run(scope.name, func(b *testing.B) {
			benchmarkSearchIn(b, env, k, scope.stores, ids, scope.name == "one" && len(all) > 1)
		})
	}
}

func benchmarkSearchIn(b *testing.B, env kenv, k *Knowledge, stores []dbq.Datastore, ids []uuid.UUID, forced bool) {
	ctx := context.Background()
	vectorWith := func(q *dbq.Queries, text string, exactBelow, exactMax int64, exactRatio float64, n int32) ([]uuid.UUID, error) {
		emb, dim := benchEmbedder()
		v, _ := emb.Embed(ctx, []string{text})
		vec := pgvector.NewVector(v[0])
		// ef_search as Search sets it, unless PARLEY_BENCH_EF says otherwise.
		ef := strconv.Itoa(DefaultEfSearch)
		if v := os.Getenv("PARLEY_BENCH_EF"); v != "" {
			ef = v
		}
		if err := q.TuneVectorSearch(ctx, ef); err != nil {
			return nil, err
		}
		if scan := os.Getenv("PARLEY_BENCH_SCAN"); scan != "" { // relaxed_order, strict_order or off
			if err := q.SetSetting(ctx, dbq.SetSettingParams{Name: "hnsw.iterative_scan", Value: scan}); err != nil {
				return nil, err
			}
		}
		rows, err := k.vectorSearch(ctx, q, dim, dbq.SearchVector512Params{Query: &vec, OrgID: env.org, DatastoreIds: ids, DatasourceIds: []uuid.UUID{}, ExactBelow: exactBelow, ExactMax: exactMax, ExactRatio: exactRatio, K: n})
		out := make([]uuid.UUID, len(rows))
		for i, r := range rows {
			out[i] = r.ChunkID
		}
		return out, err
	}
	vector := func(q *dbq.Queries, text string) ([]uuid.UUID, error) {
		return vectorWith(q, text, k.ExactBelow, k.ExactMax, k.ExactRatio, 10)
	}
	b.Run("hybrid", func(b *testing.B) {
		latencies(b, env, func(qq *dbq.Queries, q string) error {
			_, err := k.Search(ctx, qq, env.org, stores, nil, Text(q), 10)
			return err
		})
	})
	// The full-text half alone, at its budget and at others
	// (PARLEY_BENCH_BUDGETS=5000,20000).
	budgets := []int64{BM25.Budget}
	for _, v := range strings.Split(os.Getenv("PARLEY_BENCH_BUDGETS"), ",") {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && !slices.Contains(budgets, n) {
			budgets = append(budgets, n)
		}
	}
	for _, budget := range budgets {
		b.Run(fmt.Sprintf("text/budget=%d", budget), func(b *testing.B) {
			saved := BM25.Budget
			BM25.Budget = budget
			defer func() { BM25.Budget = saved }()
			latencies(b, env, func(qq *dbq.Queries, q string) error {
				_, err := k.textSearch(ctx, qq, env.org, ids, nil, q, 40)
				return err
			})
		})
	}
	b.Run("vector", func(b *testing.B) {
		latencies(b, env, func(qq *dbq.Queries, q string) error {
			_, err := vector(qq, q)
			return err
		})
	})
	// Both paths of the vector half whatever the threshold says, to choose
	// it: every distance computed, and the HNSW index filtered to the scope,
	// for as many candidates as a search asks (its 40, not 10). Only when
	// the scope is one datastore of several (forced): an exact scan of the
	// whole table at a million chunks takes seconds.
	if forced {
		for _, path := range []struct {
			name  string
			below int64
		}{{"exact", math.MaxInt64}, {"hnsw", -1}} {
			b.Run("vector/"+path.name, func(b *testing.B) {
				latencies(b, env, func(qq *dbq.Queries, q string) error {
					_, err := vectorWith(qq, q, path.below, -1, 0, 40)
					return err
				})
			})
		}
	}
	// recall@10 over 50 of the questions, measured once however many
	// iterations are asked (an exact search at 1M chunks takes seconds).
	recall := sync.OnceValues(func() (float64, error) {
		var hits, total int
		for _, q := range queries[:50] {
			var approx, exact []uuid.UUID
			err := env.store.Tenant(ctx, env.org, func(qq *dbq.Queries) error {
				var err error
				approx, err = vector(qq, q)
				return err
			})
			if err != nil {
				return 0, err
			}
			// Exact: the same query with index scans off (a sequential scan
			// computes every distance).
			err = func() error {
				tx, err := env.store.Pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx) //nolint:errcheck
				qq := dbq.New(tx)
				if err := qq.SetTenant(ctx, env.org.String()); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "SET LOCAL enable_indexscan = off"); err != nil {
					return err
				}
				exact, err = vector(qq, q)
				return err
			}()
			if err != nil {
				return 0, err
			}
			in := map[uuid.UUID]bool{}
			for _, id := range exact {
				in[id] = true
			}
			for _, id := range approx {
				if in[id] {
					hits++
				}
			}
			total += len(exact)
		}
		return float64(hits) / float64(total), nil
	})
	b.Run("recall", func(b *testing.B) {
		var r float64
		for b.Loop() {
			var err error
			if r, err = recall(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(r, "recall@10")
	})
}

// BenchmarkSearchPlans prints the full-text half's query plans at the loaded
// size (PARLEY_BENCH_EXPLAIN=1), as a generic and as a custom plan.
func BenchmarkSearchPlans(b *testing.B) {
	if os.Getenv("PARLEY_BENCH_EXPLAIN") == "" {
		b.Skip("PARLEY_BENCH_EXPLAIN=1")
	}
	env := setupSearch(b)
	ctx := context.Background()
	for b.Loop() {
		for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
			for _, query := range queries[:3] {
				if err := env.store.TenantTx(ctx, env.org, func(tx pgx.Tx, q *dbq.Queries) error {
					if _, err := tx.Exec(ctx, "SELECT set_config('plan_cache_mode', $1, true)", mode); err != nil {
						return err
					}
					fmt.Fprintf(os.Stderr, "== %s, %q\n", mode, query)
					sql, names := searchTextSQL()
					params := reflect.ValueOf(dbq.SearchTextParams{
						Query: query, OrgID: env.org, DatastoreIds: []uuid.UUID{env.store_}, DatasourceIds: []uuid.UUID{},
						Budget: BM25.Budget, K1: BM25.K1, B: BM25.B, TitleBoost: BM25.TitleBoost, K: 40,
					})
					var args []any // in the order of names, its struct's fields by name
					for _, name := range names {
						f := params.FieldByNameFunc(func(field string) bool {
							return strings.EqualFold(field, strings.ReplaceAll(name, "_", ""))
						})
						if !f.IsValid() {
							return fmt.Errorf("SearchTextParams has no field for %s", name)
						}
						args = append(args, f.Interface())
					}
					plan, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
					if err != nil {
						return err
					}
					for plan.Next() {
						var line string
						if err := plan.Scan(&line); err != nil {
							return err
						}
						fmt.Fprintln(os.Stderr, line)
					}
					return plan.Err()
				}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// searchTextSQL is SearchText's query read from its .sql file, its
// arguments numbered by first appearance; names are the arguments in that
// order.
func searchTextSQL() (sql string, names []string) {
	raw, err := os.ReadFile("../db/queries/knowledge.sql")
	if err != nil {
		panic(err)
	}
	s := string(raw)
	s = s[strings.Index(s, "-- name: SearchText :many"):]
	s = strings.TrimSpace(s[:len("-- name:")+strings.Index(s[len("-- name:"):], "-- name:")])
	s = strings.TrimSuffix(s, ";")
	args := map[string]int{}
	sql = regexp.MustCompile(`sqlc\.arg\((\w+)\)`).ReplaceAllStringFunc(s, func(m string) string {
		name := m[len("sqlc.arg(") : len(m)-1]
		if args[name] == 0 {
			args[name] = len(args) + 1
			names = append(names, name)
		}
		return fmt.Sprintf("$%d", args[name])
	})
	return sql, names
}
