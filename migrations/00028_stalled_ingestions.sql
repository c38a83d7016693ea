-- +goose Up

-- An ingestion whose process died during its last attempt (killed for its
-- memory on a huge document, a node lost) left its datasource pending or
-- running for good: River's rescuer discards the job, and nothing recorded
-- the failure. A periodic job (backend/jobs, StalledWorker) finds such
-- datasources across organizations: its transaction names a cutoff in
-- app.ingest_stalled_before, and this policy lets it see the datasources
-- pending or running unchanged since before that cutoff, and only in a
-- transaction that acts for no organization. It reads them only: each is
-- marked failed in its own organization's transaction.
CREATE FUNCTION parley_ingest_stalled(updated_at timestamptz, status text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT nullif(current_setting('app.org_id', true), '') IS NULL
          AND status IN ('pending', 'running')
          AND updated_at < nullif(current_setting('app.ingest_stalled_before', true), '')::timestamptz $$;
CREATE POLICY stalled_read ON datasources FOR SELECT
  USING (parley_ingest_stalled(updated_at, status));
-- The sweep reads the oldest unfinished first, across organizations.
CREATE INDEX datasources_unfinished ON datasources (updated_at) WHERE status IN ('pending', 'running');

-- +goose Down
DROP INDEX datasources_unfinished;
DROP POLICY stalled_read ON datasources;
DROP FUNCTION parley_ingest_stalled(timestamptz, text);
