-- +goose Up

-- Webhooks (issue 10): endpoints of an organization that receive its
-- events, and each event sent to each endpoint. backend/webhook decides
-- what is sent; a delivery row and its River job are written in the
-- transaction of the change that caused the event.
CREATE TABLE webhooks (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  url text NOT NULL,
  description text NOT NULL DEFAULT '',
  events text[] NOT NULL CHECK (cardinality(events) > 0),
  -- The signing key, sealed with the server's secrets key (AES-256-GCM,
  -- backend/webhook.Sealer); never stored in the clear.
  secret bytea NOT NULL,
  enabled boolean NOT NULL DEFAULT true,
  -- Set when a delivery used up its retries, cleared by a success.
  failing_since timestamptz,
  last_error text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, id)
);
CREATE INDEX webhooks_org_created ON webhooks (org_id, created_at DESC, id DESC);
ALTER TABLE webhooks ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhooks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhooks
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
CREATE TRIGGER webhooks_resource_id AFTER INSERT OR DELETE ON webhooks
  FOR EACH ROW EXECUTE FUNCTION parley_track_resource_id('webhook');

CREATE TABLE webhook_deliveries (
  org_id uuid NOT NULL,
  id uuid NOT NULL,
  webhook_id uuid NOT NULL,
  -- The webhook-id header (msg_...): one per event, kept by a replay.
  event_id text NOT NULL,
  event_type text NOT NULL,
  -- The exact body that is signed and sent.
  body bytea NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, id),
  FOREIGN KEY (org_id, webhook_id) REFERENCES webhooks (org_id, id) ON DELETE CASCADE
);
CREATE INDEX webhook_deliveries_org_webhook_created
  ON webhook_deliveries (org_id, webhook_id, created_at DESC, id DESC);
ALTER TABLE webhook_deliveries ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhook_deliveries FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhook_deliveries
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
CREATE TRIGGER webhook_deliveries_resource_id AFTER INSERT OR DELETE ON webhook_deliveries
  FOR EACH ROW EXECUTE FUNCTION parley_track_resource_id('webhook_delivery');

CREATE TABLE webhook_attempts (
  org_id uuid NOT NULL,
  delivery_id uuid NOT NULL,
  attempt int NOT NULL,
  attempted_at timestamptz NOT NULL DEFAULT now(),
  -- 0 when no response came.
  status_code int NOT NULL DEFAULT 0,
  duration_ms bigint NOT NULL DEFAULT 0,
  error text NOT NULL DEFAULT '',
  PRIMARY KEY (org_id, delivery_id, attempt),
  FOREIGN KEY (org_id, delivery_id) REFERENCES webhook_deliveries (org_id, id) ON DELETE CASCADE
);
ALTER TABLE webhook_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhook_attempts FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhook_attempts
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());

-- +goose Down
DELETE FROM resource_ids WHERE kind IN ('webhook', 'webhook_delivery');
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
