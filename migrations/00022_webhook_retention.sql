-- +goose Up

-- Deliveries keep the exact body sent (a conversation's messages, a form's
-- values) and are kept for a retention period (--webhook-retention, 30
-- days unless configured), then deleted with their attempts by a periodic
-- job (backend/jobs, webhook.Prune) that works across organizations. The
-- job's transaction names a cutoff in app.webhook_expired_before, and these
-- policies let it see and delete exactly the deliveries finished
-- (succeeded or failed) and created before that cutoff; a pending delivery
-- is never taken. Attempts go by the foreign key's cascade.
CREATE POLICY expired_read ON webhook_deliveries FOR SELECT
  USING (status <> 'pending'
         AND created_at < nullif(current_setting('app.webhook_expired_before', true), '')::timestamptz);
CREATE POLICY expired_delete ON webhook_deliveries FOR DELETE
  USING (status <> 'pending'
         AND created_at < nullif(current_setting('app.webhook_expired_before', true), '')::timestamptz);
-- The sweep reads the oldest first, across organizations.
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at);

-- +goose Down
DROP INDEX webhook_deliveries_created;
DROP POLICY expired_delete ON webhook_deliveries;
DROP POLICY expired_read ON webhook_deliveries;
