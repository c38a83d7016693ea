-- +goose Up

-- Publishing a run rewrites its chunks in place.
--
-- Publishing sets `visible` on every chunk of the run (and clears it on the
-- run before). Each such update wrote a new version of the row on another
-- page, because ingestion fills the pages (fillfactor 100), so every index
-- took a new entry for it: one insertion into the HNSW graph a chunk, as
-- costly as the chunk's first. Postgres also recomputed the stored `tsv` of
-- every row it updated, though the text had not changed. Publishing 17,000
-- chunks of 512 dimensions took 27 s in the update alone; with room on the
-- page for the new version (fillfactor 50: a heap-only update, no index
-- touched) and `tsv` a plain column that ingestion's INSERT computes from
-- the same expression, 0.3 s. The price: the chunks' heap (text inline,
-- not the toasted vectors) takes up to twice the pages.
ALTER TABLE chunks ALTER COLUMN tsv DROP EXPRESSION;
ALTER TABLE chunks SET (fillfactor = 50);

-- +goose Down
ALTER TABLE chunks RESET (fillfactor);
ALTER TABLE chunks DROP COLUMN tsv;
ALTER TABLE chunks ADD COLUMN tsv tsvector GENERATED ALWAYS AS (
  setweight(to_tsvector('english', title || ' ' || heading), 'A') || to_tsvector('english', text)) STORED;
