-- +goose Up

-- A run of ingestion fingerprints what it is writing (the embedder and every
-- chunk's text and place). A retry of the same run finds its fingerprint
-- here and resumes where the previous attempt stopped, instead of starting
-- over; a run of other content or another embedder starts afresh.
ALTER TABLE datasources ADD COLUMN ingest_fingerprint text NOT NULL DEFAULT '';

-- One chunk per place in a run: a resumed or concurrent run of the same
-- content cannot store a chunk twice (InsertChunks skips what is there).
-- The duplicates go first, every organization's: FORCE would show this
-- transaction, which sets no tenant, none of them, and the index would then
-- refuse them (lifted as 00006 does: the table stays locked until commit).
ALTER TABLE chunks NO FORCE ROW LEVEL SECURITY;
DELETE FROM chunks c USING chunks d
WHERE c.org_id = d.org_id AND c.datasource_id = d.datasource_id AND c.generation = d.generation
  AND c.position = d.position AND c.id > d.id;
ALTER TABLE chunks FORCE ROW LEVEL SECURITY;
DROP INDEX chunks_org_datasource;
CREATE UNIQUE INDEX chunks_org_datasource ON chunks (org_id, datasource_id, generation, position);

-- +goose Down
DROP INDEX chunks_org_datasource;
CREATE INDEX chunks_org_datasource ON chunks (org_id, datasource_id, generation, position);
ALTER TABLE datasources DROP COLUMN ingest_fingerprint;
