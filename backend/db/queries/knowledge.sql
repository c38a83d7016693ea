-- name: CreateDatastore :one
INSERT INTO datastores (org_id, id, name, description, embedding_model, embedding_dim)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(name), sqlc.arg(description), sqlc.arg(embedding_model), sqlc.arg(embedding_dim))
RETURNING *;

-- name: GetDatastore :one
SELECT * FROM datastores WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: KeyShareDatastore :one
-- GetDatastore for a transaction that adds rows referring to the datastore
-- (a datasource, an agent's link): FOR KEY SHARE keeps it until the
-- transaction ends, and a deletion already running is waited for (no row
-- when it commits), before anything that deletion cascades to is written.
SELECT * FROM datastores WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
FOR KEY SHARE;

-- name: ListDatastores :many
SELECT * FROM datastores WHERE org_id = sqlc.arg(org_id) ORDER BY created_at DESC, id DESC;

-- name: PageDatastores :many
-- A page of the organization's datastores, newest first, after the cursor
-- (the last row of the previous page).
SELECT * FROM datastores
WHERE org_id = sqlc.arg(org_id)
  AND (sqlc.narg(before_time)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_time)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_rows);

-- name: DatastoreCounts :one
SELECT (SELECT count(*) FROM datasources d WHERE d.org_id = sqlc.arg(org_id) AND d.datastore_id = sqlc.arg(datastore_id))::bigint AS datasources,
       (SELECT coalesce(sum(d.chunk_count), 0) FROM datasources d WHERE d.org_id = sqlc.arg(org_id) AND d.datastore_id = sqlc.arg(datastore_id))::bigint AS chunks;

-- name: UpdateDatastore :one
UPDATE datastores SET
  name = coalesce(sqlc.narg(name), name),
  description = coalesce(sqlc.narg(description), description),
  updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
RETURNING *;

-- name: DeleteDatastore :execrows
DELETE FROM datastores WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: LockDatastore :execrows
-- Takes a datastore's row as its deletion does, before the deletion: a
-- datasource being created in it (KeyShareDatastore) commits first, or
-- waits and then finds it gone, so that DatastoreDatasourceIDs, read next,
-- lists every datasource the deletion will cascade to.
SELECT 1 FROM datastores WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
FOR UPDATE;

-- name: DatastoreDatasourceIDs :many
SELECT id FROM datasources WHERE org_id = sqlc.arg(org_id) AND datastore_id = sqlc.arg(datastore_id);

-- name: CreateDatasource :one
INSERT INTO datasources (org_id, id, datastore_id, type, name, config, content, content_type, size_bytes)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(datastore_id), sqlc.arg(type), sqlc.arg(name), sqlc.arg(config),
        sqlc.narg(content), sqlc.arg(content_type), sqlc.arg(size_bytes))
RETURNING id, datastore_id, type, name, status, error, config, content_type, size_bytes, generation, chunk_count, created_at, updated_at, synced_at;

-- name: GetDatasource :one
SELECT id, datastore_id, type, name, status, error, config, content_type, size_bytes, generation, chunk_count, created_at, updated_at, synced_at
FROM datasources WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: GetDatasourceContent :one
SELECT d.id, d.datastore_id, d.type, d.name, d.status, d.config, d.content, d.content_type, d.generation,
       s.embedding_model, s.embedding_dim
FROM datasources d JOIN datastores s ON s.org_id = d.org_id AND s.id = d.datastore_id
WHERE d.org_id = sqlc.arg(org_id) AND d.id = sqlc.arg(id);

-- name: ListDatasources :many
SELECT id, datastore_id, type, name, status, error, config, content_type, size_bytes, generation, chunk_count, created_at, updated_at, synced_at
FROM datasources WHERE org_id = sqlc.arg(org_id) AND datastore_id = sqlc.arg(datastore_id)
ORDER BY created_at DESC, id DESC;

-- name: PageDatasources :many
-- A page of a datastore's datasources, newest first, after the cursor.
SELECT id, datastore_id, type, name, status, error, config, content_type, size_bytes, generation, chunk_count, created_at, updated_at, synced_at
FROM datasources
WHERE org_id = sqlc.arg(org_id) AND datastore_id = sqlc.arg(datastore_id)
  AND (sqlc.narg(before_time)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_time)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_rows);

-- name: DeleteDatasource :execrows
DELETE FROM datasources WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: MessageBatchEnd :one
-- The id of the batch_rows-th message after after, in id order: the end of
-- the next batch of ForgetCitedText. No row when fewer are left (the last
-- batch then ends at the greatest uuid: a bound, never NULL, so that the
-- update's scan of the primary key stops at it). An index-only scan.
SELECT id FROM messages
WHERE org_id = sqlc.arg(org_id) AND id > sqlc.arg(after)
ORDER BY id
LIMIT 1 OFFSET sqlc.arg(batch_rows)::int - 1;

-- name: ForgetCitedText :execrows
-- Takes the text (chunk, excerpt, heading) of the given datasources'
-- passages out of the answers that cited them (messages.sources, protojson
-- Sources), among the messages of ids in (after, upto], a range of the
-- primary key. The citation stays (the datasource's id and name, the
-- source's name, URL and score); other datasources' passages are
-- untouched. Only an answer still holding such text is written, so that
-- running it again changes nothing.
UPDATE messages m SET sources = (
  SELECT jsonb_agg(CASE WHEN e.s->>'datasourceId' = ANY (sqlc.arg(datasource_ids)::text[])
                        THEN e.s - 'chunk' - 'excerpt' - 'heading' ELSE e.s END ORDER BY e.n)
  FROM jsonb_array_elements(m.sources) WITH ORDINALITY AS e(s, n))
WHERE m.org_id = sqlc.arg(org_id) AND m.id > sqlc.arg(after)
  AND m.id <= sqlc.arg(upto)
  AND m.role = 'assistant' AND m.sources <> '[]'
  AND EXISTS (SELECT 1 FROM jsonb_array_elements(m.sources) AS c(s)
              WHERE c.s->>'datasourceId' = ANY (sqlc.arg(datasource_ids)::text[])
                AND c.s ?| array['chunk', 'excerpt', 'heading']);

-- name: DeliveryBatchEnd :one
-- As MessageBatchEnd, over the organization's webhook deliveries.
SELECT id FROM webhook_deliveries
WHERE org_id = sqlc.arg(org_id) AND id > sqlc.arg(after)
ORDER BY id
LIMIT 1 OFFSET sqlc.arg(batch_rows)::int - 1;

-- name: LockWebhooksForForget :exec
-- Taken before LockDeliveredText's row locks: an endpoint's deletion
-- locks the endpoint, then its deliveries (the cascade); taking the
-- endpoints first, in the same order, it waits instead of deadlocking.
-- KEY SHARE: new deliveries (CreateWebhookDelivery) go on.
SELECT 1 FROM webhooks WHERE org_id = sqlc.arg(org_id) ORDER BY id FOR KEY SHARE;

-- name: LockDeliveredText :exec
-- Takes the deliveries ForgetDeliveredText changes, in a statement before
-- it: a replay of one (webhook.ReplayWebhookDelivery, which holds it FOR
-- KEY SHARE while it copies its body into a new delivery) is waited for
-- here, and its copy, committed before the UPDATE's statement starts, is
-- changed with the others (by this batch or a later one: a copy's id is
-- newer). FOR UPDATE: the UPDATE's own lock (FOR NO KEY UPDATE) does not
-- wait for a KEY SHARE, and the copy kept the text.
SELECT 1 FROM webhook_deliveries d
WHERE d.org_id = sqlc.arg(org_id) AND d.id > sqlc.arg(after) AND d.id <= sqlc.arg(upto)
  AND d.event_type = 'message.created'
  AND jsonb_typeof(convert_from(d.body, 'UTF8')::jsonb->'data'->'sources') = 'array'
  AND EXISTS (SELECT 1 FROM jsonb_array_elements(convert_from(d.body, 'UTF8')::jsonb->'data'->'sources') AS c(s)
              WHERE c.s->>'datasourceId' = ANY (sqlc.arg(datasource_ids)::text[])
                AND c.s ?| array['chunk', 'excerpt', 'heading'])
ORDER BY d.id
FOR UPDATE;

-- name: ForgetDeliveredText :execrows
-- ForgetCitedText for the bodies of message.created deliveries, kept for
-- retries and replays until retention removes them: the passages of the
-- given datasources lose their text in data.sources, the rest of the body
-- is unchanged (as JSON: jsonb's text writes its keys in its own order).
UPDATE webhook_deliveries w SET body = convert_to(jsonb_set(x.j, '{data,sources}', (
    SELECT jsonb_agg(CASE WHEN e.s->>'datasourceId' = ANY (sqlc.arg(datasource_ids)::text[])
                          THEN e.s - 'chunk' - 'excerpt' - 'heading' ELSE e.s END ORDER BY e.n)
    FROM jsonb_array_elements(x.j->'data'->'sources') WITH ORDINALITY AS e(s, n)))::text, 'UTF8')
FROM (SELECT d.org_id, d.id, convert_from(d.body, 'UTF8')::jsonb AS j
      FROM webhook_deliveries d
      WHERE d.org_id = sqlc.arg(org_id) AND d.id > sqlc.arg(after) AND d.id <= sqlc.arg(upto)
        AND d.event_type = 'message.created') x
WHERE w.org_id = x.org_id AND w.id = x.id
  AND jsonb_typeof(x.j->'data'->'sources') = 'array'
  AND EXISTS (SELECT 1 FROM jsonb_array_elements(x.j->'data'->'sources') AS c(s)
              WHERE c.s->>'datasourceId' = ANY (sqlc.arg(datasource_ids)::text[])
                AND c.s ?| array['chunk', 'excerpt', 'heading']);

-- name: SetDatasourceStatus :exec
UPDATE datasources SET status = sqlc.arg(status), error = sqlc.arg(error), updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: DeleteChunksAbove :exec
-- Removes what an interrupted run left: chunks newer than the visible generation.
DELETE FROM chunks WHERE org_id = sqlc.arg(org_id) AND datasource_id = sqlc.arg(datasource_id) AND generation > sqlc.arg(generation);

-- name: LockDatasource :one
-- Every ingestion transaction that touches a datasource's chunks takes its
-- row first, as DELETE does (row, then chunks by cascade): one lock order,
-- no deadlock between ingestion and deletion. Its datastore comes before
-- it (FOR KEY SHARE, in the CTE, which the join must read before it can
-- return the datasource's row to lock), as DeleteDatastore takes the
-- datastore before the datasources it cascades to: the chunks' triggers
-- write datastore_text_stats and text_postings, whose inserts check the
-- datastore's key, and checked only then it waited for a deletion of the
-- datastore that waited for this datasource. No row when either is gone.
-- The datastore's embedder, as it is now, tells a run whether its vectors
-- are still the datastore's (a change of model queues a new run).
WITH store AS MATERIALIZED (
  SELECT s.id, s.embedding_model FROM datasources k
  JOIN datastores s ON s.org_id = k.org_id AND s.id = k.datastore_id
  WHERE k.org_id = sqlc.arg(org_id) AND k.id = sqlc.arg(id)
  FOR KEY SHARE OF s
)
SELECT d.generation, d.ingest_fingerprint, store.embedding_model FROM datasources d
JOIN store ON store.id = d.datastore_id
WHERE d.org_id = sqlc.arg(org_id) AND d.id = sqlc.arg(id)
FOR NO KEY UPDATE OF d;

-- name: StartIngestRun :exec
UPDATE datasources SET status = 'running', error = '', ingest_fingerprint = sqlc.arg(fingerprint), updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: WrittenPositions :many
-- The places of a run that earlier attempts already wrote.
SELECT position FROM chunks
WHERE org_id = sqlc.arg(org_id) AND datasource_id = sqlc.arg(datasource_id) AND generation = sqlc.arg(generation);

-- name: InsertChunks :exec
-- One batch of a run's chunks in one statement, a row per element of the
-- arrays, which are zipped (COPY is refused on tables with row-level security; one INSERT of
-- many rows is planned once and fires the chunks' statement triggers once,
-- where a pipelined INSERT a row did both per row).
-- The words' vector (tsv) is computed here, once: it is a plain column so
-- that publishing, which updates every row, does not compute it again
-- (migration 00019). Its title and heading words weigh A.
INSERT INTO chunks (org_id, id, datastore_id, datasource_id, generation, position, text, title, heading, url, page, tokens, embedding, embedding_dim, tsv)
SELECT sqlc.arg(org_id), c.id, sqlc.arg(datastore_id), sqlc.arg(datasource_id), sqlc.arg(generation),
       c.position, c.text, c.title, c.heading, c.url, c.page, c.tokens, c.embedding, sqlc.arg(embedding_dim),
       setweight(to_tsvector('english', c.title || ' ' || c.heading), 'A') || to_tsvector('english', c.text)
FROM (SELECT unnest(sqlc.arg(ids)::uuid[]) AS id, unnest(sqlc.arg(positions)::int[]) AS position,
             unnest(sqlc.arg(texts)::text[]) AS text, unnest(sqlc.arg(titles)::text[]) AS title,
             unnest(sqlc.arg(headings)::text[]) AS heading, unnest(sqlc.arg(urls)::text[]) AS url,
             unnest(sqlc.arg(pages)::int[]) AS page, unnest(sqlc.arg(tokens)::int[]) AS tokens,
             unnest(sqlc.arg(embeddings)::vector[]) AS embedding) c
ON CONFLICT (org_id, datasource_id, generation, position) DO NOTHING;

-- name: PublishGeneration :exec
-- Makes a finished run's chunks the visible ones, in one statement per step
-- of one transaction (see knowledge.Ingest).
UPDATE chunks SET visible = (generation = sqlc.arg(generation))
WHERE org_id = sqlc.arg(org_id) AND datasource_id = sqlc.arg(datasource_id)
  AND visible <> (generation = sqlc.arg(generation));

-- name: DeleteChunksBelow :exec
DELETE FROM chunks WHERE org_id = sqlc.arg(org_id) AND datasource_id = sqlc.arg(datasource_id) AND generation < sqlc.arg(generation);

-- name: MarkSynced :exec
-- embedding_model: the embedder of the chunks it makes visible (SearchVector*).
UPDATE datasources SET status = 'synced', error = '', ingest_fingerprint = '', generation = sqlc.arg(generation), chunk_count = sqlc.arg(chunk_count),
  embedding_model = sqlc.arg(embedding_model), synced_at = now(), updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: CountChunks :one
SELECT count(*) FROM chunks WHERE org_id = sqlc.arg(org_id) AND datasource_id = sqlc.arg(datasource_id) AND generation = sqlc.arg(generation);

-- name: AgentDatastores :many
SELECT datastore_id FROM agent_datastores WHERE org_id = sqlc.arg(org_id) AND agent_id = sqlc.arg(agent_id) ORDER BY datastore_id;

-- name: AgentDatastoreRows :many
-- The datastores attached to an agent, whole: what a chat turn searches,
-- and with which embedders, read in one statement.
SELECT sqlc.embed(d) FROM agent_datastores a
JOIN datastores d ON d.org_id = a.org_id AND d.id = a.datastore_id
WHERE a.org_id = sqlc.arg(org_id) AND a.agent_id = sqlc.arg(agent_id)
ORDER BY d.id;

-- name: DatasourcesAmong :many
-- Which of ids are datasources of the datastores datastore_ids: a search
-- filter's check (knowledge.CheckFilter).
SELECT id FROM datasources
WHERE org_id = sqlc.arg(org_id) AND datastore_id = ANY(sqlc.arg(datastore_ids)::uuid[])
  AND id = ANY(sqlc.arg(ids)::uuid[]);

-- name: AgentsDatastores :many
-- The datastores of a page of agents (ListAgents), in one query.
SELECT agent_id, datastore_id FROM agent_datastores
WHERE org_id = sqlc.arg(org_id) AND agent_id = ANY(sqlc.arg(agent_ids)::uuid[])
ORDER BY agent_id, datastore_id;

-- name: ClearAgentDatastores :exec
DELETE FROM agent_datastores WHERE org_id = sqlc.arg(org_id) AND agent_id = sqlc.arg(agent_id);

-- name: AddAgentDatastore :exec
INSERT INTO agent_datastores (org_id, agent_id, datastore_id) VALUES (sqlc.arg(org_id), sqlc.arg(agent_id), sqlc.arg(datastore_id));

-- name: SearchVector512 :many
-- Nearest visible chunks by cosine distance, for 512-dimension datastores.
-- Those of datasources whose visible chunks another embedder made
-- (stale: their datastore's embedder changed since, and their re-embedding
-- is queued or failed) are left out: their vectors are not comparable with
-- the query's, of embedding_model (the full-text half still finds them).
-- The index's branch has a twin for that case, gated as the others are, so
-- that the common one (no such datasource) keeps its plan.
-- The scope (the datastores' synced datasources, or the datasources asked)
-- is ranked exactly when parley_rank_exactly says so (migrations/00020):
-- its chunks read through their datasources' index and every distance
-- computed (the ORDER BY is not the index's expression, so the HNSW index
-- cannot serve it). Else the HNSW index serves it (expression and
-- predicate match it). The choice is made once; each branch's gate is a
-- one-time filter, so only one branch runs and the search is one round trip.
WITH scope AS MATERIALIZED (
  SELECT d.id, d.chunk_count, d.embedding_model FROM datasources d
  WHERE d.org_id = sqlc.arg(org_id) AND d.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
    AND (cardinality(sqlc.arg(datasource_ids)::uuid[]) = 0 OR d.id = ANY (sqlc.arg(datasource_ids)::uuid[]))
), stale AS MATERIALIZED (
  SELECT coalesce(array_agg(s.id), '{}')::uuid[] AS ids FROM scope s
  WHERE s.embedding_model NOT IN ('', sqlc.arg(embedding_model)::text)
), exact AS MATERIALIZED (
  SELECT parley_rank_exactly(coalesce(sum(chunk_count), 0), sqlc.arg(exact_below)::bigint, sqlc.arg(exact_max)::bigint,
    sqlc.arg(exact_ratio)::float8, 'chunks_embedding_512') AS yes
  FROM scope
)
(SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.url, c.page,
        (c.embedding <=> sqlc.arg(query)::vector)::float8 AS distance
 FROM scope s JOIN chunks c ON c.org_id = sqlc.arg(org_id) AND c.datasource_id = s.id
 WHERE c.visible AND c.embedding_dim = 512
   AND c.datasource_id <> ALL ((SELECT st.ids FROM stale st)::uuid[])
   AND (SELECT yes FROM exact)
 ORDER BY c.embedding <=> sqlc.arg(query)::vector
 LIMIT sqlc.arg(k))
UNION ALL
(SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.url, c.page,
        (c.embedding::vector(512) <=> sqlc.arg(query)::vector(512))::float8 AS distance
 FROM chunks c
 WHERE c.org_id = sqlc.arg(org_id) AND c.embedding_dim = 512 AND c.visible
   AND c.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
   AND (cardinality(sqlc.arg(datasource_ids)::uuid[]) = 0 OR c.datasource_id = ANY (sqlc.arg(datasource_ids)::uuid[]))
   AND NOT (SELECT yes FROM exact) AND (SELECT cardinality(st.ids) = 0 FROM stale st)
 ORDER BY c.embedding::vector(512) <=> sqlc.arg(query)::vector(512)
 LIMIT sqlc.arg(k))
UNION ALL
(SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.url, c.page,
        (c.embedding::vector(512) <=> sqlc.arg(query)::vector(512))::float8 AS distance
 FROM chunks c
 WHERE c.org_id = sqlc.arg(org_id) AND c.embedding_dim = 512 AND c.visible
   AND c.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
   AND (cardinality(sqlc.arg(datasource_ids)::uuid[]) = 0 OR c.datasource_id = ANY (sqlc.arg(datasource_ids)::uuid[]))
   AND c.datasource_id <> ALL ((SELECT st.ids FROM stale st)::uuid[])
   AND NOT (SELECT yes FROM exact) AND (SELECT cardinality(st.ids) > 0 FROM stale st)
 ORDER BY c.embedding::vector(512) <=> sqlc.arg(query)::vector(512)
 LIMIT sqlc.arg(k));

-- name: SearchVector768 :many
-- Nearest visible chunks by cosine distance, for 768-dimension datastores.
-- Those of datasources whose visible chunks another embedder made
-- (stale: their datastore's embedder changed since, and their re-embedding
-- is queued or failed) are left out: their vectors are not comparable with
-- the query's, of embedding_model (the full-text half still finds them).
-- The index's branch has a twin for that case, gated as the others are, so
-- that the common one (no such datasource) keeps its plan.
-- The scope (the datastores' synced datasources, or the datasources asked)
-- is ranked exactly when parley_rank_exactly says so (migrations/00020):
-- its chunks read through their datasources' index and every distance
-- computed (the ORDER BY is not the index's expression, so the HNSW index
-- cannot serve it). Else the HNSW index serves it (expression and
-- predicate match it). The choice is made once; each branch's gate is a
-- one-time filter, so only one branch runs and the search is one round trip.
WITH scope AS MATERIALIZED (
  SELECT d.id, d.chunk_count, d.embedding_model FROM datasources d
  WHERE d.org_id = sqlc.arg(org_id) AND d.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
    AND (cardinality(sqlc.arg(datasource_ids)::uuid[]) = 0 OR d.id = ANY (sqlc.arg(datasource_ids)::uuid[]))
), stale AS MATERIALIZED (
  SELECT coalesce(array_agg(s.id), '{}')::uuid[] AS ids FROM scope s
  WHERE s.embedding_model NOT IN ('', sqlc.arg(embedding_model)::text)
), exact AS MATERIALIZED (
  SELECT parley_rank_exactly(coalesce(sum(chunk_count), 0), sqlc.arg(exact_below)::bigint, sqlc.arg(exact_max)::bigint,
    sqlc.arg(exact_ratio)::float8, 'chunks_embedding_768') AS yes
  FROM scope
)
(SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.url, c.page,
        (c.embedding <=> sqlc.arg(query)::vector)::float8 AS distance
 FROM scope s JOIN chunks c ON c.org_id = sqlc.arg(org_id) AND c.datasource_id = s.id
 WHERE c.visible AND c.embedding_dim = 768
   AND c.datasource_id <> ALL ((SELECT st.ids FROM stale st)::uuid[])
   AND (SELECT yes FROM exact)
 ORDER BY c.embedding <=> sqlc.arg(query)::vector
 LIMIT sqlc.arg(k))
UNION ALL
(SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.url, c.page,
        (c.embedding::vector(768) <=> sqlc.arg(query)::vector(768))::float8 AS distance
 FROM chunks c
 WHERE c.org_id = sqlc.arg(org_id) AND c.embedding_dim = 768 AND c.visible
   AND c.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
   AND (cardinality(sqlc.arg(datasource_ids)::uuid[]) = 0 OR c.datasource_id = ANY (sqlc.arg(datasource_ids)::uuid[]))
   AND NOT (SELECT yes FROM exact) AND (SELECT cardinality(st.ids) = 0 FROM stale st)
 ORDER BY c.embedding::vector(768) <=> sqlc.arg(query)::vector(768)
 LIMIT sqlc.arg(k))
UNION ALL
(SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.url, c.page,
        (c.embedding::vector(768) <=> sqlc.arg(query)::vector(768))::float8 AS distance
 FROM chunks c
 WHERE c.org_id = sqlc.arg(org_id) AND c.embedding_dim = 768 AND c.visible
   AND c.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
   AND (cardinality(sqlc.arg(datasource_ids)::uuid[]) = 0 OR c.datasource_id = ANY (sqlc.arg(datasource_ids)::uuid[]))
   AND c.datasource_id <> ALL ((SELECT st.ids FROM stale st)::uuid[])
   AND NOT (SELECT yes FROM exact) AND (SELECT cardinality(st.ids) > 0 FROM stale st)
 ORDER BY c.embedding::vector(768) <=> sqlc.arg(query)::vector(768)
 LIMIT sqlc.arg(k));

-- name: SearchVector1536 :many
-- Nearest visible chunks by cosine distance, for 1536-dimension datastores.
-- Those of datasources whose visible chunks another embedder made
-- (stale: their datastore's embedder changed since, and their re-embedding
-- is queued or failed) are left out: their vectors are not comparable with
-- the query's, of embedding_model (the full-text half still finds them).
-- The index's branch has a twin for that case, gated as the others are, so
-- that the common one (no such datasource) keeps its plan.
-- The scope (the datastores' synced datasources, or the datasources asked)
-- is ranked exactly when parley_rank_exactly says so (migrations/00020):
-- its chunks read through their datasources' index and every distance
-- computed (the ORDER BY is not the index's expression, so the HNSW index
-- cannot serve it). Else the HNSW index serves it (expression and
-- predicate match it). The choice is made once; each branch's gate is a
-- one-time filter, so only one branch runs and the search is one round trip.
WITH scope AS MATERIALIZED (
  SELECT d.id, d.chunk_count, d.embedding_model FROM datasources d
  WHERE d.org_id = sqlc.arg(org_id) AND d.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
    AND (cardinality(sqlc.arg(datasource_ids)::uuid[]) = 0 OR d.id = ANY (sqlc.arg(datasource_ids)::uuid[]))
), stale AS MATERIALIZED (
  SELECT coalesce(array_agg(s.id), '{}')::uuid[] AS ids FROM scope s
  WHERE s.embedding_model NOT IN ('', sqlc.arg(embedding_model)::text)
), exact AS MATERIALIZED (
  SELECT parley_rank_exactly(coalesce(sum(chunk_count), 0), sqlc.arg(exact_below)::bigint, sqlc.arg(exact_max)::bigint,
    sqlc.arg(exact_ratio)::float8, 'chunks_embedding_1536') AS yes
  FROM scope
)
(SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.url, c.page,
        (c.embedding <=> sqlc.arg(query)::vector)::float8 AS distance
 FROM scope s JOIN chunks c ON c.org_id = sqlc.arg(org_id) AND c.datasource_id = s.id
 WHERE c.visible AND c.embedding_dim = 1536
   AND c.datasource_id <> ALL ((SELECT st.ids FROM stale st)::uuid[])
   AND (SELECT yes FROM exact)
 ORDER BY c.embedding <=> sqlc.arg(query)::vector
 LIMIT sqlc.arg(k))
UNION ALL
(SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.url, c.page,
        (c.embedding::vector(1536) <=> sqlc.arg(query)::vector(1536))::float8 AS distance
 FROM chunks c
 WHERE c.org_id = sqlc.arg(org_id) AND c.embedding_dim = 1536 AND c.visible
   AND c.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
   AND (cardinality(sqlc.arg(datasource_ids)::uuid[]) = 0 OR c.datasource_id = ANY (sqlc.arg(datasource_ids)::uuid[]))
   AND NOT (SELECT yes FROM exact) AND (SELECT cardinality(st.ids) = 0 FROM stale st)
 ORDER BY c.embedding::vector(1536) <=> sqlc.arg(query)::vector(1536)
 LIMIT sqlc.arg(k))
UNION ALL
(SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.url, c.page,
        (c.embedding::vector(1536) <=> sqlc.arg(query)::vector(1536))::float8 AS distance
 FROM chunks c
 WHERE c.org_id = sqlc.arg(org_id) AND c.embedding_dim = 1536 AND c.visible
   AND c.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
   AND (cardinality(sqlc.arg(datasource_ids)::uuid[]) = 0 OR c.datasource_id = ANY (sqlc.arg(datasource_ids)::uuid[]))
   AND c.datasource_id <> ALL ((SELECT st.ids FROM stale st)::uuid[])
   AND NOT (SELECT yes FROM exact) AND (SELECT cardinality(st.ids) > 0 FROM stale st)
 ORDER BY c.embedding::vector(1536) <=> sqlc.arg(query)::vector(1536)
 LIMIT sqlc.arg(k));

-- name: SearchText :many
-- The full-text half of a search, BM25 over text_postings (migrations/00016;
-- knowledge.BM25Params), planned and scored in one statement:
--   n: the datastores' visible chunks (N) and tokens.
--   df: each of the query's terms (Postgres' English stemmer; stop words
--     dropped) that some visible chunk of the datastores holds, with how
--     many hold it (of every datasource: the datasource filter narrows the
--     chunks scored, not the weights).
--   ranked, planned: the terms read, from the rarest (df, then term,
--     ascending) while the running sum of their df is at most budget, the
--     rarest always; each with its inverse document frequency
--     idf = ln(1 + (N - df + 0.5) / (df + 0.5)); and the average chunk,
--     max(tokens / N, 1). No row when no term is read or N is 0.
--   p, scored: the visible chunks holding a term read, scored from the
--     terms' postings: a term's frequency in a chunk (its places, one in
--     the title or heading path counting 1 + title_boost) saturated by k1,
--     normalised by b against the average chunk.
-- Both reads of text_postings name their terms by an array (t.term = ANY),
-- so the primary key finds them whatever the planner guesses of the rows
-- before; a join on the term was found scanning a datastore's every term.
WITH n AS (
  SELECT sum(st.chunks)::float8 AS chunks, sum(st.tokens)::float8 AS tokens
  FROM datastore_text_stats st
  WHERE st.org_id = sqlc.arg(org_id) AND st.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
),
df AS (
  SELECT t.term, sum(t.df)::bigint AS df
  FROM text_postings t
  WHERE t.org_id = sqlc.arg(org_id) AND t.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
    AND t.term = ANY (tsvector_to_array(to_tsvector('english', sqlc.arg(query)::text)))
  GROUP BY t.term
),
ranked AS (
  SELECT df.term, df.df, row_number() OVER w AS rarest, sum(df.df) OVER w AS running
  FROM df
  WINDOW w AS (ORDER BY df.df, df.term ROWS UNBOUNDED PRECEDING)
),
planned AS (
  SELECT array_agg(r.term ORDER BY r.rarest) AS terms,
         array_agg(ln(1 + (n.chunks - r.df::float8 + 0.5) / (r.df::float8 + 0.5)) ORDER BY r.rarest) AS idfs,
         greatest(n.tokens / n.chunks, 1) AS avg_tokens
  FROM ranked r CROSS JOIN n
  WHERE n.chunks > 0 AND (r.rarest = 1 OR r.running <= sqlc.arg(budget)::bigint)
  GROUP BY n.chunks, n.tokens
),
p AS (
  SELECT t.term, u.chunk_id, u.tf + sqlc.arg(title_boost)::float8 * u.title AS tf, u.length
  FROM text_postings t
  CROSS JOIN LATERAL parley_postings(t.chunk_ids, t.tfs, t.title_places, t.lengths) AS u(chunk_id, tf, title, length)
  WHERE t.org_id = sqlc.arg(org_id) AND t.datastore_id = ANY (sqlc.arg(datastore_ids)::uuid[])
    AND t.term = ANY ((SELECT pl.terms FROM planned pl)::text[])
    AND (cardinality(sqlc.arg(datasource_ids)::uuid[]) = 0 OR t.datasource_id = ANY (sqlc.arg(datasource_ids)::uuid[]))
),
scored AS (
  SELECT p.chunk_id,
         sum(pl.idfs[array_position(pl.terms, p.term)] * p.tf * (sqlc.arg(k1)::float8 + 1)
             / (p.tf + sqlc.arg(k1)::float8 * (1 - sqlc.arg(b)::float8 + sqlc.arg(b)::float8 * p.length / pl.avg_tokens)))::float8 AS score
  FROM p CROSS JOIN planned pl
  GROUP BY p.chunk_id
  ORDER BY score DESC, p.chunk_id
  LIMIT sqlc.arg(k)
)
SELECT c.id, c.datasource_id, c.text, c.title, c.heading, c.url, c.page, s.score
FROM scored s JOIN chunks c ON c.org_id = sqlc.arg(org_id) AND c.id = s.chunk_id AND c.visible
ORDER BY s.score DESC, c.id;

-- name: TuneVectorSearch :exec
-- pgvector 0.8 iterative index scans: keep scanning the HNSW graph until
-- enough rows pass the filters, so a filtered search loses no results.
SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),
       set_config('hnsw.ef_search', sqlc.arg(ef_search)::text, true);

-- name: DatasourceNames :many
SELECT id, name, type, config FROM datasources WHERE org_id = sqlc.arg(org_id) AND id = ANY (sqlc.arg(ids)::uuid[]);

-- name: SetSetting :exec
-- A transaction-local setting (benchmarks compare search settings with it).
SELECT set_config(sqlc.arg(name)::text, sqlc.arg(value)::text, true);

-- name: SetDatastoreEmbedder :one
UPDATE datastores SET embedding_model = sqlc.arg(embedding_model), embedding_dim = sqlc.arg(embedding_dim), updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
RETURNING *;

-- name: LockKnowledgeQuota :exec
-- Serializes, per organization, the transactions that publish knowledge
-- (knowledge.run.publish) or add a datasource (CreateDatasource), so that
-- each checks the quota against chunk counts and kept bytes no other can
-- change before it commits. Until the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('parley.knowledge_quota:' || sqlc.arg(org_id)::uuid::text, 0));

-- name: KnowledgeQuota :one
-- The chunks the organization's plan lets it hold, and those its
-- datasources hold but datasource id (whose chunks a new ingestion
-- replaces; a nil id counts them all); stored is the bytes of content its
-- datasources keep (uploads and texts, for their resyncs).
SELECT p.knowledge_chunks,
       (SELECT coalesce(sum(d.chunk_count), 0) FROM datasources d
        WHERE d.org_id = o.id AND d.id IS DISTINCT FROM sqlc.narg(except_id)::uuid)::bigint AS held,
       (SELECT coalesce(sum(d.size_bytes), 0) FROM datasources d WHERE d.org_id = o.id)::bigint AS stored
FROM organizations o JOIN plans p ON p.id = o.plan
WHERE o.id = sqlc.arg(org_id);

-- name: FailStalledDatasource :execrows
-- Fail for an ingestion lost with its process (knowledge.FailStalled): only
-- while the datasource is still unfinished as the sweep saw it (seen, its
-- updated_at), since every new run's enqueueing changes it.
UPDATE datasources SET status = 'error', error = sqlc.arg(error), updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
  AND status IN ('pending', 'running') AND updated_at = sqlc.arg(seen);
