-- +goose Up

-- Whether a vector search ranks its scope exactly or through the HNSW
-- index, decided in one place for the three per-dimension queries
-- (backend/db/queries/knowledge.sql, SearchVector512/768/1536): exactly
-- when the scope holds at most exact_below chunks, or at most exact_max
-- with the square of its chunk count at most exact_ratio times the rows of
-- the index (pg_class.reltuples: set by CREATE INDEX and (auto)ANALYZE, -1
-- before the first, read as 0). docs/benchmarks.md, "Exact or HNSW".
-- +goose StatementBegin
CREATE FUNCTION parley_rank_exactly(scope_chunks bigint, exact_below bigint, exact_max bigint, exact_ratio float8, index_name text)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT scope_chunks <= exact_below
      OR (scope_chunks <= exact_max AND scope_chunks::float8 * scope_chunks <= exact_ratio
          * greatest((SELECT reltuples FROM pg_catalog.pg_class WHERE oid = to_regclass(index_name)), 0))
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION parley_rank_exactly(bigint, bigint, bigint, float8, text);
