-- +goose Up

-- Deliveries keep the exact body sent (a conversation's messages, a form's
-- values) and are kept for a retention period (--webhook-retention, 30
-- days unless configured), then deleted with their attempts by a periodic
-- job (backend/jobs, webhook.Prune) that works across organizations. The
-- job's transaction names a cutoff in app.webhook_expired_before, and these
-- policies let it see, lock and delete exactly the deliveries created
-- before that cutoff and finished (succeeded or failed), or still pending
-- two days after it (past every retry: a job lost or never run), and only
-- in a transaction that acts for no organization (a tenant transaction
-- that also named a cutoff would see other organizations' otherwise). It
-- updates none: the UPDATE policy is there for the lock of SKIP LOCKED,
-- and no delivery passes its WITH CHECK (false) unless the tenant
-- policy's. Attempts go by the foreign key's cascade.
CREATE FUNCTION parley_webhook_expired(created_at timestamptz, status text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT nullif(current_setting('app.org_id', true), '') IS NULL
          AND created_at < nullif(current_setting('app.webhook_expired_before', true), '')::timestamptz
          AND (status <> 'pending'
               OR created_at < nullif(current_setting('app.webhook_expired_before', true), '')::timestamptz - interval '2 days') $$;
CREATE POLICY expired_read ON webhook_deliveries FOR SELECT
  USING (parley_webhook_expired(created_at, status));
CREATE POLICY expired_lock ON webhook_deliveries FOR UPDATE
  USING (parley_webhook_expired(created_at, status)) WITH CHECK (false);
CREATE POLICY expired_delete ON webhook_deliveries FOR DELETE
  USING (parley_webhook_expired(created_at, status));
-- The sweep reads the oldest first, across organizations.
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at);

-- +goose Down
DROP INDEX webhook_deliveries_created;
DROP POLICY expired_delete ON webhook_deliveries;
DROP POLICY expired_lock ON webhook_deliveries;
DROP POLICY expired_read ON webhook_deliveries;
DROP FUNCTION parley_webhook_expired(timestamptz, text);
