-- +goose Up

-- Contacts a message was sent with (SPEC §2.4), one per email (else phone)
-- per organization.
CREATE TABLE contacts (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  email text,
  phone_number text,
  first_name text NOT NULL DEFAULT '',
  last_name text NOT NULL DEFAULT '',
  custom_fields jsonb NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, id),
  CHECK (email IS NOT NULL OR phone_number IS NOT NULL)
);
CREATE UNIQUE INDEX contacts_org_email ON contacts (org_id, email) WHERE email IS NOT NULL;
CREATE UNIQUE INDEX contacts_org_phone ON contacts (org_id, phone_number) WHERE email IS NULL;
ALTER TABLE contacts ENABLE ROW LEVEL SECURITY;
ALTER TABLE contacts FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON contacts
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());

ALTER TABLE conversations
  ADD COLUMN contact_id uuid,
  ADD FOREIGN KEY (org_id, contact_id) REFERENCES contacts (org_id, id) ON DELETE SET NULL (contact_id);
CREATE INDEX conversations_org_agent_created ON conversations (org_id, agent_id, created_at DESC, id);
CREATE INDEX conversations_org_agent_visitor ON conversations (org_id, agent_id, visitor_id, created_at DESC, id);

ALTER TABLE messages
  ADD COLUMN channel text NOT NULL DEFAULT 'api',
  ADD COLUMN attachments jsonb NOT NULL DEFAULT '[]',
  ADD COLUMN sources jsonb NOT NULL DEFAULT '[]',
  ADD COLUMN model text,
  ADD COLUMN provider text,
  ADD COLUMN latency_ms integer,
  ADD COLUMN prompt_tokens integer,
  ADD COLUMN completion_tokens integer,
  ADD COLUMN cost double precision,
  -- An answer cut short (the client left, the provider failed, shutdown).
  ADD COLUMN incomplete boolean NOT NULL DEFAULT false;

-- Public agents can be reached without a key: a transaction that names a
-- public agent (app.public_agent_id) may read that agent's row, and only if
-- it is public.
CREATE POLICY public_agent ON agents FOR SELECT
  USING (visibility = 'public'
         AND id = nullif(current_setting('app.public_agent_id', true), '')::uuid);
-- ...and its organization (for its plan's limits).
CREATE POLICY public_agent_org ON organizations FOR SELECT
  USING (id IN (SELECT a.org_id FROM agents a
                WHERE a.visibility = 'public'
                  AND a.id = nullif(current_setting('app.public_agent_id', true), '')::uuid));

-- +goose Down
DROP POLICY public_agent_org ON organizations;
DROP POLICY public_agent ON agents;
ALTER TABLE messages
  DROP COLUMN incomplete, DROP COLUMN cost, DROP COLUMN completion_tokens, DROP COLUMN prompt_tokens,
  DROP COLUMN latency_ms, DROP COLUMN provider, DROP COLUMN model, DROP COLUMN sources,
  DROP COLUMN attachments, DROP COLUMN channel;
DROP INDEX conversations_org_agent_visitor;
DROP INDEX conversations_org_agent_created;
ALTER TABLE conversations DROP COLUMN contact_id;
DROP TABLE contacts;
