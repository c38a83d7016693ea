-- +goose Up

-- Full-text statistics per datastore, for a full-text half that ranks like
-- BM25 (issue 12; knowledge.SearchText): how many visible chunks hold each
-- term (df, for its inverse document frequency), and how many visible chunks
-- and tokens the datastore has (for the average chunk length). Postgres'
-- ts_rank_cd has neither. Kept by statement triggers on chunks from the rows
-- whose visibility changes, so that every path keeps them exact: publishing
-- a generation, deleting a datasource or a datastore (by cascade), a direct
-- insert of visible rows. (A trigger with transition tables cannot name
-- columns: every UPDATE of chunks runs it; one that changes no visibility
-- costs a join of its rows, no more.)
CREATE TABLE datastore_text_stats (
  org_id uuid NOT NULL,
  datastore_id uuid NOT NULL,
  chunks bigint NOT NULL DEFAULT 0,
  tokens bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (org_id, datastore_id),
  FOREIGN KEY (org_id, datastore_id) REFERENCES datastores (org_id, id) ON DELETE CASCADE
);

-- A term's row stays, at df 0, when its last chunk goes (deleting it would
-- take another pass over the changed terms); df 0 reads as absent.
CREATE TABLE datastore_terms (
  org_id uuid NOT NULL,
  datastore_id uuid NOT NULL,
  term text NOT NULL,
  df integer NOT NULL,
  PRIMARY KEY (org_id, datastore_id, term),
  FOREIGN KEY (org_id, datastore_id) REFERENCES datastores (org_id, id) ON DELETE CASCADE
);

-- The triggers' one body, run on the rows whose visibility a statement
-- changed (changed: a query of org_id, datastore_id, tsv, tokens and sign,
-- +1 now visible, -1 no longer). Positive sums are upserted; negative ones
-- only update (a datastore being deleted has no row left to make: inserting
-- one would fail its foreign key). The stats row is written first and the
-- terms in their order, so two transactions touching one datastore take its
-- rows in the same order and never deadlock.
-- +goose StatementBegin
CREATE FUNCTION parley_chunk_text_stats() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  changed text;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NOT EXISTS (SELECT 1 FROM new_rows WHERE visible) THEN RETURN NULL; END IF;
    changed := 'SELECT org_id, datastore_id, tsv, tokens, 1 AS sign FROM new_rows WHERE visible';
  ELSIF TG_OP = 'DELETE' THEN
    IF NOT EXISTS (SELECT 1 FROM old_rows WHERE visible) THEN RETURN NULL; END IF;
    changed := 'SELECT org_id, datastore_id, tsv, tokens, -1 AS sign FROM old_rows WHERE visible';
  ELSE
    changed := 'SELECT n.org_id, n.datastore_id, n.tsv, n.tokens, CASE WHEN n.visible THEN 1 ELSE -1 END AS sign
                FROM new_rows n JOIN old_rows o ON o.org_id = n.org_id AND o.id = n.id WHERE n.visible <> o.visible';
  END IF;
  EXECUTE format($q$
    WITH changed AS MATERIALIZED (%s),
    stats AS (
      SELECT org_id, datastore_id, sum(sign) AS chunks, sum(sign * tokens) AS tokens
      FROM changed GROUP BY org_id, datastore_id
    ),
    stats_up AS (
      INSERT INTO datastore_text_stats AS s (org_id, datastore_id, chunks, tokens)
      SELECT org_id, datastore_id, chunks, tokens FROM stats WHERE chunks > 0 ORDER BY org_id, datastore_id
      ON CONFLICT (org_id, datastore_id) DO UPDATE SET chunks = s.chunks + excluded.chunks, tokens = s.tokens + excluded.tokens
      RETURNING 1
    ),
    stats_down AS (
      UPDATE datastore_text_stats s SET chunks = s.chunks + d.chunks, tokens = s.tokens + d.tokens
      FROM stats d WHERE d.chunks <= 0 AND s.org_id = d.org_id AND s.datastore_id = d.datastore_id
      RETURNING 1
    ),
    terms AS (
      SELECT c.org_id, c.datastore_id, t.lexeme AS term, sum(c.sign)::integer AS df
      FROM changed c CROSS JOIN LATERAL unnest(c.tsv) t
      GROUP BY c.org_id, c.datastore_id, t.lexeme HAVING sum(c.sign) <> 0
    ),
    terms_up AS (
      INSERT INTO datastore_terms AS s (org_id, datastore_id, term, df)
      SELECT org_id, datastore_id, term, df FROM terms
      WHERE df > 0 AND (SELECT count(*) FROM stats_up) >= 0
      ORDER BY org_id, datastore_id, term
      ON CONFLICT (org_id, datastore_id, term) DO UPDATE SET df = s.df + excluded.df
      RETURNING 1
    )
    UPDATE datastore_terms s SET df = greatest(s.df + d.df, 0)
    FROM terms d
    WHERE d.df < 0 AND (SELECT count(*) FROM stats_down) >= 0 AND (SELECT count(*) FROM terms_up) >= 0
      AND s.org_id = d.org_id AND s.datastore_id = d.datastore_id AND s.term = d.term
  $q$, changed);
  RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER chunks_text_stats_insert AFTER INSERT ON chunks
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION parley_chunk_text_stats();
CREATE TRIGGER chunks_text_stats_update AFTER UPDATE ON chunks
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION parley_chunk_text_stats();
CREATE TRIGGER chunks_text_stats_delete AFTER DELETE ON chunks
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION parley_chunk_text_stats();

-- What is already stored: counted with row security off for this
-- transaction's owner (the tables are made, and their policies forced,
-- after), then the chunks' policy forced again.
ALTER TABLE chunks NO FORCE ROW LEVEL SECURITY;
INSERT INTO datastore_text_stats (org_id, datastore_id, chunks, tokens)
SELECT org_id, datastore_id, count(*), sum(tokens) FROM chunks WHERE visible GROUP BY org_id, datastore_id;
INSERT INTO datastore_terms (org_id, datastore_id, term, df)
SELECT c.org_id, c.datastore_id, t.lexeme, count(*) FROM chunks c CROSS JOIN LATERAL unnest(c.tsv) t
WHERE c.visible GROUP BY c.org_id, c.datastore_id, t.lexeme;
ALTER TABLE chunks FORCE ROW LEVEL SECURITY;

ALTER TABLE datastore_text_stats ENABLE ROW LEVEL SECURITY;
ALTER TABLE datastore_text_stats FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON datastore_text_stats
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
ALTER TABLE datastore_terms ENABLE ROW LEVEL SECURITY;
ALTER TABLE datastore_terms FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON datastore_terms
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());

-- +goose Down
DROP TRIGGER chunks_text_stats_insert ON chunks;
DROP TRIGGER chunks_text_stats_update ON chunks;
DROP TRIGGER chunks_text_stats_delete ON chunks;
DROP FUNCTION parley_chunk_text_stats();
DROP TABLE datastore_terms;
DROP TABLE datastore_text_stats;
