-- +goose Up

-- How many chunks of knowledge an organization of each plan may hold, all
-- its datastores together: without a bound, any organization (a free one
-- too) could fill the deployment's disk and hold its ingestion workers
-- with documents 20 MiB at a time (some 16,000 chunks: a free plan holds one).
-- A chunk is at most 300 tokens of text
-- (about 1,200 characters of English) with its embedding; an operator
-- changes a plan's on the operator page (/console/admin).
ALTER TABLE plans ADD COLUMN knowledge_chunks bigint NOT NULL DEFAULT 25000
  CHECK (knowledge_chunks > 0);
-- Plans are the operators' to update (migration 00006's policy): the
-- migration steps around it.
ALTER TABLE plans NO FORCE ROW LEVEL SECURITY;
UPDATE plans SET knowledge_chunks = CASE id
  WHEN 'free' THEN 25000
  WHEN 'starter' THEN 250000
  WHEN 'pro' THEN 2500000
  WHEN 'enterprise' THEN 25000000
  ELSE knowledge_chunks END;
ALTER TABLE plans FORCE ROW LEVEL SECURITY;

-- +goose Down
ALTER TABLE plans DROP COLUMN knowledge_chunks;
