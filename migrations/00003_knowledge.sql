-- +goose Up

CREATE TABLE datastores (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  name text NOT NULL,
  description text NOT NULL DEFAULT '',
  -- The embedder of its chunks; changing it re-embeds them.
  embedding_model text NOT NULL,
  embedding_dim integer NOT NULL CHECK (embedding_dim > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, id)
);
ALTER TABLE datastores ENABLE ROW LEVEL SECURITY;
ALTER TABLE datastores FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON datastores
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
CREATE TRIGGER datastores_resource_id AFTER INSERT OR DELETE ON datastores
  FOR EACH ROW EXECUTE FUNCTION parley_track_resource_id('datastore');

CREATE TABLE datasources (
  org_id uuid NOT NULL,
  id uuid NOT NULL,
  datastore_id uuid NOT NULL,
  type text NOT NULL CHECK (type IN ('text', 'file', 'web_page', 'web_site', 'qa')),
  name text NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'synced', 'error')),
  error text NOT NULL DEFAULT '',
  -- url, maxPages, question, answer, sourceUrl, fileName.
  config jsonb NOT NULL DEFAULT '{}',
  -- The text or the uploaded file, kept so that a resync needs no re-upload.
  content bytea,
  content_type text NOT NULL DEFAULT '',
  size_bytes bigint NOT NULL DEFAULT 0,
  -- The ingestion run whose chunks are visible; a run writes generation+1
  -- and makes it visible in one transaction when it has written them all.
  generation integer NOT NULL DEFAULT 0,
  chunk_count integer NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  synced_at timestamptz,
  PRIMARY KEY (org_id, id),
  FOREIGN KEY (org_id, datastore_id) REFERENCES datastores (org_id, id) ON DELETE CASCADE
);
CREATE INDEX datasources_org_datastore ON datasources (org_id, datastore_id, created_at DESC);
ALTER TABLE datasources ENABLE ROW LEVEL SECURITY;
ALTER TABLE datasources FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON datasources
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
CREATE TRIGGER datasources_resource_id AFTER INSERT OR DELETE ON datasources
  FOR EACH ROW EXECUTE FUNCTION parley_track_resource_id('datasource');

CREATE TABLE chunks (
  org_id uuid NOT NULL,
  id uuid NOT NULL,
  datastore_id uuid NOT NULL,
  datasource_id uuid NOT NULL,
  generation integer NOT NULL,
  -- Only the chunks of a datasource's current generation are visible.
  visible boolean NOT NULL DEFAULT false,
  position integer NOT NULL,
  text text NOT NULL,
  title text NOT NULL DEFAULT '',
  heading text NOT NULL DEFAULT '',
  url text NOT NULL DEFAULT '',
  page integer NOT NULL DEFAULT 0,
  tokens integer NOT NULL,
  -- Unsized, so that datastores may use embedders of different dimensions;
  -- each dimension has its own partial HNSW index on a cast.
  embedding vector NOT NULL,
  embedding_dim integer NOT NULL,
  tsv tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', title || ' ' || heading), 'A') || to_tsvector('english', text)) STORED,
  PRIMARY KEY (org_id, id),
  FOREIGN KEY (org_id, datasource_id) REFERENCES datasources (org_id, id) ON DELETE CASCADE,
  CHECK (vector_dims(embedding) = embedding_dim)
);
CREATE INDEX chunks_org_datasource ON chunks (org_id, datasource_id, generation, position);
CREATE INDEX chunks_tsv ON chunks USING gin (tsv);
CREATE INDEX chunks_embedding_512 ON chunks USING hnsw ((embedding::vector(512)) vector_cosine_ops)
  WHERE embedding_dim = 512;
CREATE INDEX chunks_embedding_1536 ON chunks USING hnsw ((embedding::vector(1536)) vector_cosine_ops)
  WHERE embedding_dim = 1536;
CREATE INDEX chunks_embedding_768 ON chunks USING hnsw ((embedding::vector(768)) vector_cosine_ops)
  WHERE embedding_dim = 768;
ALTER TABLE chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE chunks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON chunks
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());

CREATE TABLE agent_datastores (
  org_id uuid NOT NULL,
  agent_id uuid NOT NULL,
  datastore_id uuid NOT NULL,
  PRIMARY KEY (org_id, agent_id, datastore_id),
  FOREIGN KEY (org_id, agent_id) REFERENCES agents (org_id, id) ON DELETE CASCADE,
  FOREIGN KEY (org_id, datastore_id) REFERENCES datastores (org_id, id) ON DELETE CASCADE
);
ALTER TABLE agent_datastores ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent_datastores FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agent_datastores
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());

-- +goose Down
DROP TABLE agent_datastores;
DROP TABLE chunks;
DROP TABLE datasources;
DROP TABLE datastores;
