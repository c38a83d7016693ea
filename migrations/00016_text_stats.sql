-- +goose Up

-- The full-text half of a search ranks like BM25 (issue 12;
-- knowledge.SearchText), from an inverted index of its own:
--
-- text_postings: for each datasource and term, the visible chunks that hold
-- the term, with the term's frequency in each (a place in the title or
-- heading path marked) and each chunk's length in tokens. One row per
-- datasource and term, its postings in arrays: a datasource's rows are
-- rebuilt whole when its visible chunks change (a generation published, the
-- datasource deleted), which ingestion does one datasource at a time.
-- df is the number of postings, read without opening the arrays.
--
-- datastore_text_stats: a datastore's visible chunks and tokens (the
-- average chunk length).
--
-- Why not the GIN index on chunks.tsv: under row-level security, Postgres
-- may only use an index for a condition whose operator is leakproof before
-- the policy's own condition, and tsvector @@ tsquery is not (only equality
-- of plain types is): every full-text search read the whole table. These
-- rows are found by equality on (org_id, datastore_id, term).
CREATE TABLE text_postings (
  org_id uuid NOT NULL,
  datastore_id uuid NOT NULL,
  term text NOT NULL,
  datasource_id uuid NOT NULL,
  df integer NOT NULL,
  chunk_ids uuid[] NOT NULL,
  -- The term's places in the chunk's text, plus title_places.
  tfs smallint[] NOT NULL,
  -- 1 when the term is in the chunk's title or heading path, else 0.
  title_places smallint[] NOT NULL,
  lengths integer[] NOT NULL,
  PRIMARY KEY (org_id, datastore_id, term, datasource_id),
  FOREIGN KEY (org_id, datasource_id) REFERENCES datasources (org_id, id) ON DELETE CASCADE,
  FOREIGN KEY (org_id, datastore_id) REFERENCES datastores (org_id, id) ON DELETE CASCADE
);
CREATE INDEX text_postings_datasource ON text_postings (org_id, datasource_id);
-- Nothing can use it (above), and every chunk written paid for it.
DROP INDEX chunks_tsv;

-- A text_postings row's postings, one row each (sqlc does not know
-- unnest of several arrays; reading the arrays by subscript instead
-- would open a toasted array once per element).
CREATE FUNCTION parley_postings(chunk_ids uuid[], tfs smallint[], title_places smallint[], lengths integer[])
RETURNS TABLE (chunk_id uuid, tf smallint, title smallint, length integer)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT * FROM unnest(chunk_ids, tfs, title_places, lengths) $$;

CREATE TABLE datastore_text_stats (
  org_id uuid NOT NULL,
  datastore_id uuid NOT NULL,
  chunks bigint NOT NULL DEFAULT 0,
  tokens bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (org_id, datastore_id),
  FOREIGN KEY (org_id, datastore_id) REFERENCES datastores (org_id, id) ON DELETE CASCADE
);

-- Rebuilds one datasource's postings from its visible chunks.
-- +goose StatementBegin
CREATE FUNCTION parley_index_datasource_text(p_org uuid, p_datasource uuid) RETURNS void
LANGUAGE sql AS $$
  DELETE FROM text_postings WHERE org_id = p_org AND datasource_id = p_datasource;
  INSERT INTO text_postings (org_id, datastore_id, term, datasource_id, df, chunk_ids, tfs, title_places, lengths)
  SELECT c.org_id, c.datastore_id, u.lexeme, c.datasource_id, count(*),
         array_agg(c.id ORDER BY c.id),
         array_agg(cardinality(u.positions)::smallint ORDER BY c.id),
         array_agg((CASE WHEN 'A' = ANY (u.weights) THEN 1 ELSE 0 END)::smallint ORDER BY c.id),
         array_agg(c.tokens ORDER BY c.id)
  FROM chunks c CROSS JOIN LATERAL unnest(c.tsv) AS u(lexeme, positions, weights)
  WHERE c.org_id = p_org AND c.datasource_id = p_datasource AND c.visible
  GROUP BY c.org_id, c.datastore_id, u.lexeme, c.datasource_id
  ORDER BY u.lexeme;
$$;
-- +goose StatementEnd

-- Rebuilds the postings of the datasources whose chunks' visibility a
-- statement changed, and moves the datastores' counts. Run by the triggers
-- below on every insert, update and delete of chunks (a trigger with
-- transition tables cannot name columns); a statement that changes no
-- visibility (the unpublished chunks ingestion inserts, an embedding
-- rewritten) costs a look at its rows, no more. A datastore's stats row
-- is taken before its postings, so two transactions writing one datastore
-- lock in the same order; a negative count only updates (a datastore being
-- deleted has no row left to make, and inserting one would fail its key).
-- +goose StatementBegin
CREATE FUNCTION parley_chunk_text_index() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  changed text;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NOT EXISTS (SELECT 1 FROM new_rows WHERE visible) THEN RETURN NULL; END IF;
    changed := 'SELECT org_id, datastore_id, datasource_id, tokens, 1 AS sign FROM new_rows WHERE visible';
  ELSIF TG_OP = 'DELETE' THEN
    IF NOT EXISTS (SELECT 1 FROM old_rows WHERE visible) THEN RETURN NULL; END IF;
    changed := 'SELECT org_id, datastore_id, datasource_id, tokens, -1 AS sign FROM old_rows WHERE visible';
  ELSE
    changed := 'SELECT n.org_id, n.datastore_id, n.datasource_id, n.tokens, CASE WHEN n.visible THEN 1 ELSE -1 END AS sign
                FROM new_rows n JOIN old_rows o ON o.org_id = n.org_id AND o.id = n.id WHERE n.visible <> o.visible';
  END IF;
  EXECUTE format($q$
    CREATE TEMP TABLE parley_text_changed ON COMMIT DROP AS
    SELECT org_id, datastore_id, datasource_id, sum(sign) AS chunks, sum(sign * tokens) AS tokens
    FROM (%s) c GROUP BY org_id, datastore_id, datasource_id
  $q$, changed);
  IF NOT EXISTS (SELECT 1 FROM parley_text_changed) THEN
    DROP TABLE parley_text_changed;
    RETURN NULL;
  END IF;

  INSERT INTO datastore_text_stats AS s (org_id, datastore_id, chunks, tokens)
  SELECT org_id, datastore_id, sum(chunks), sum(tokens) FROM parley_text_changed
  GROUP BY org_id, datastore_id HAVING sum(chunks) > 0 ORDER BY org_id, datastore_id
  ON CONFLICT (org_id, datastore_id) DO UPDATE SET chunks = s.chunks + excluded.chunks, tokens = s.tokens + excluded.tokens;
  UPDATE datastore_text_stats s SET chunks = s.chunks + d.chunks, tokens = s.tokens + d.tokens
  FROM (SELECT org_id, datastore_id, sum(chunks) AS chunks, sum(tokens) AS tokens FROM parley_text_changed
        GROUP BY org_id, datastore_id HAVING sum(chunks) <= 0) d
  WHERE s.org_id = d.org_id AND s.datastore_id = d.datastore_id;

  PERFORM parley_index_datasource_text(d.org_id, d.datasource_id)
  FROM (SELECT DISTINCT org_id, datasource_id FROM parley_text_changed ORDER BY org_id, datasource_id) d;

  DROP TABLE parley_text_changed;
  RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER chunks_text_index_insert AFTER INSERT ON chunks
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION parley_chunk_text_index();
CREATE TRIGGER chunks_text_index_update AFTER UPDATE ON chunks
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION parley_chunk_text_index();
CREATE TRIGGER chunks_text_index_delete AFTER DELETE ON chunks
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION parley_chunk_text_index();

-- What is already stored, read with the chunks' policy not forced on this
-- transaction's owner (the new tables' policies come after), then forced
-- again.
ALTER TABLE chunks NO FORCE ROW LEVEL SECURITY;
INSERT INTO datastore_text_stats (org_id, datastore_id, chunks, tokens)
SELECT org_id, datastore_id, count(*), sum(tokens) FROM chunks WHERE visible GROUP BY org_id, datastore_id;
SELECT parley_index_datasource_text(d.org_id, d.datasource_id)
FROM (SELECT DISTINCT org_id, datasource_id FROM chunks WHERE visible) d;
ALTER TABLE chunks FORCE ROW LEVEL SECURITY;

ALTER TABLE text_postings ENABLE ROW LEVEL SECURITY;
ALTER TABLE text_postings FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON text_postings
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
ALTER TABLE datastore_text_stats ENABLE ROW LEVEL SECURITY;
ALTER TABLE datastore_text_stats FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON datastore_text_stats
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());

-- +goose Down
CREATE INDEX chunks_tsv ON chunks USING gin (tsv);
DROP TRIGGER chunks_text_index_insert ON chunks;
DROP TRIGGER chunks_text_index_update ON chunks;
DROP TRIGGER chunks_text_index_delete ON chunks;
DROP FUNCTION parley_chunk_text_index();
DROP FUNCTION parley_index_datasource_text(uuid, uuid);
DROP FUNCTION parley_postings(uuid[], smallint[], smallint[], integer[]);
DROP TABLE text_postings;
DROP TABLE datastore_text_stats;
