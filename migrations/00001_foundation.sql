-- +goose Up

-- pgvector backs datastore search. scripts/db-setup.sh creates it as a
-- superuser; on a managed service, an administrator does. IF NOT EXISTS lets
-- Parley's own (non-superuser) role run this migration afterwards.
CREATE EXTENSION IF NOT EXISTS vector;

-- The organization the current transaction acts for, set by the store with
-- set_config('app.org_id', ..., true) and so reset at commit or rollback. An
-- unset (or reset, hence empty) setting means no organization: no row passes.
CREATE FUNCTION parley_current_org() RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT nullif(current_setting('app.org_id', true), '')::uuid $$;

-- Plans are global reference data, not tenant data.
CREATE TABLE plans (
  id text PRIMARY KEY,
  requests_per_minute int NOT NULL CHECK (requests_per_minute > 0),
  requests_per_day int NOT NULL CHECK (requests_per_day > 0)
);
-- Enterprise limits are set per organization by an operator (parley admin
-- set-limits); until then an enterprise organization gets these defaults.
-- Their order (free < starter < pro < enterprise) is backend/plan's.
INSERT INTO plans (id, requests_per_minute, requests_per_day) VALUES
  ('free', 10, 1000),
  ('starter', 60, 10000),
  ('pro', 300, 100000),
  ('enterprise', 1000, 1000000);

CREATE TABLE organizations (
  id uuid PRIMARY KEY,
  name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
  plan text NOT NULL REFERENCES plans (id),
  -- Enterprise limits, set by an operator (parley admin set-limits).
  custom_requests_per_minute int CHECK (custom_requests_per_minute > 0),
  custom_requests_per_day int CHECK (custom_requests_per_day > 0),
  created_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE organizations ENABLE ROW LEVEL SECURITY;
ALTER TABLE organizations FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON organizations
  USING (id = parley_current_org()) WITH CHECK (id = parley_current_org());

-- Ids of tenant resources, and nothing else: lets the API tell a resource of
-- another organization (403, SPEC §5.6) from one that does not exist (404)
-- without any organization seeing another's rows. Holds no tenant data.
CREATE TABLE resource_ids (
  id uuid PRIMARY KEY,
  kind text NOT NULL
);
-- +goose StatementBegin
CREATE FUNCTION parley_track_resource_id() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO resource_ids (id, kind) VALUES (NEW.id, TG_ARGV[0]);
    RETURN NEW;
  END IF;
  DELETE FROM resource_ids WHERE id = OLD.id;
  RETURN OLD;
END $$;
-- +goose StatementEnd

CREATE TABLE api_keys (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  name text NOT NULL,
  -- SHA-256 of the whole key; the key itself is never stored.
  key_hash bytea NOT NULL CHECK (length(key_hash) = 32),
  display_prefix text NOT NULL,
  plan text NOT NULL REFERENCES plans (id),
  scopes text[] NOT NULL CHECK (cardinality(scopes) > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz,
  revoked_at timestamptz,
  last_used_at timestamptz,
  PRIMARY KEY (org_id, id)
);
-- The one index not led by org_id: a key is found by its hash before its
-- organization is known. (Under Citus this becomes a reference lookup.)
CREATE UNIQUE INDEX api_keys_key_hash ON api_keys (key_hash);
CREATE INDEX api_keys_org_created ON api_keys (org_id, created_at DESC);
ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON api_keys
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
-- Authentication: a transaction that knows a key (it set app.key_hash to the
-- hex SHA-256 of it) may read that key's row, and only that one.
CREATE POLICY by_secret ON api_keys FOR SELECT
  USING (key_hash = decode(nullif(current_setting('app.key_hash', true), ''), 'hex'));
CREATE TRIGGER api_keys_resource_id AFTER INSERT OR DELETE ON api_keys
  FOR EACH ROW EXECUTE FUNCTION parley_track_resource_id('api_key');
-- ...and the organization that owns it.
CREATE POLICY by_key_secret ON organizations FOR SELECT
  USING (id IN (SELECT k.org_id FROM api_keys k
                WHERE k.key_hash = decode(nullif(current_setting('app.key_hash', true), ''), 'hex')));

CREATE TABLE agents (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  name text NOT NULL,
  description text NOT NULL DEFAULT '',
  instructions text NOT NULL,
  model text NOT NULL,
  temperature double precision NOT NULL CHECK (temperature BETWEEN 0 AND 1),
  tools text[] NOT NULL DEFAULT '{}',
  visibility text NOT NULL DEFAULT 'private' CHECK (visibility IN ('public', 'private')),
  status text NOT NULL DEFAULT 'active',
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, id)
);
CREATE INDEX agents_org_created ON agents (org_id, created_at DESC, id DESC);
ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE agents FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agents
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
CREATE TRIGGER agents_resource_id AFTER INSERT OR DELETE ON agents
  FOR EACH ROW EXECUTE FUNCTION parley_track_resource_id('agent');

-- Conversations and messages: the chat issue fills them; agent stats and
-- agent deletion already read and remove them.
CREATE TABLE conversations (
  org_id uuid NOT NULL,
  -- The client's conversationId.
  id text NOT NULL,
  agent_id uuid NOT NULL,
  visitor_id text,
  status text NOT NULL DEFAULT 'unresolved'
    CHECK (status IN ('unresolved', 'resolved', 'human_requested')),
  channel text NOT NULL DEFAULT 'api',
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, id),
  FOREIGN KEY (org_id, agent_id) REFERENCES agents (org_id, id) ON DELETE CASCADE
);
CREATE INDEX conversations_org_agent ON conversations (org_id, agent_id, updated_at DESC);
ALTER TABLE conversations ENABLE ROW LEVEL SECURITY;
ALTER TABLE conversations FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON conversations
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());

CREATE TABLE messages (
  org_id uuid NOT NULL,
  id uuid NOT NULL,
  conversation_id text NOT NULL,
  role text NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
  content text NOT NULL,
  rating smallint CHECK (rating BETWEEN 1 AND 5),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, id),
  FOREIGN KEY (org_id, conversation_id) REFERENCES conversations (org_id, id) ON DELETE CASCADE
);
CREATE INDEX messages_org_conversation ON messages (org_id, conversation_id, created_at);
ALTER TABLE messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE messages FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON messages
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());

-- +goose Down
DROP TABLE messages;
DROP TABLE conversations;
DROP TABLE agents;
DROP POLICY by_key_secret ON organizations;
DROP TABLE api_keys;
DROP FUNCTION parley_track_resource_id();
DROP TABLE resource_ids;
DROP TABLE organizations;
DROP TABLE plans;
DROP FUNCTION parley_current_org();
