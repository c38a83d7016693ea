-- +goose Up

-- The embedder that made a datasource's visible chunks ('' while it has
-- none), recorded when a run publishes them (MarkSynced). A datastore's
-- switch of embedder re-embeds its datasources one job at a time, and a
-- datasource whose re-embedding fails keeps its older chunks visible: the
-- vector search compared their vectors, another model's, with the query's
-- whenever both models have one dimension (use-lite and lexical, 512),
-- and ranked them (and reported their similarity) at random. It leaves
-- such datasources out (SearchVector*).
ALTER TABLE datasources ADD COLUMN embedding_model text NOT NULL DEFAULT '';

-- Every organization's datasources that have published chunks: row-level
-- security is lifted for the update and set again before the migration's
-- transaction commits, as 00032 does. A datasource in the middle of a
-- switch is taken to be re-embedded already, as it was before.
ALTER TABLE datasources NO FORCE ROW LEVEL SECURITY;
ALTER TABLE datastores NO FORCE ROW LEVEL SECURITY;
UPDATE datasources d SET embedding_model = s.embedding_model
FROM datastores s
WHERE s.org_id = d.org_id AND s.id = d.datastore_id AND d.generation > 0;
ALTER TABLE datastores FORCE ROW LEVEL SECURITY;
ALTER TABLE datasources FORCE ROW LEVEL SECURITY;

-- +goose Down
ALTER TABLE datasources DROP COLUMN embedding_model;
