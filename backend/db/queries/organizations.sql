-- name: CreateOrganization :one
INSERT INTO organizations (id, name, plan)
VALUES (sqlc.arg(id), sqlc.arg(name), sqlc.arg(plan))
RETURNING *;

-- name: GetOrganization :one
SELECT o.*,
       coalesce(o.custom_requests_per_minute, p.requests_per_minute)::int AS requests_per_minute,
       coalesce(o.custom_requests_per_day, p.requests_per_day)::int AS requests_per_day,
       p.knowledge_chunks,
       (SELECT coalesce(sum(d.chunk_count), 0) FROM datasources d WHERE d.org_id = o.id)::bigint AS chunks
FROM organizations o JOIN plans p ON p.id = o.plan
WHERE o.id = sqlc.arg(id);

-- name: LockOrganizationPlan :one
-- The organization's plan, held until the transaction ends: a key issued
-- under it cannot outrank a plan an operator lowers meanwhile. Locked for
-- update (not shared), so that the organization's keys are issued one at a
-- time: two counting its working keys at once (account.MaxKeys) would both
-- see room for one. (NO KEY: references to the row are not held up.)
SELECT plan FROM organizations WHERE id = sqlc.arg(id) FOR NO KEY UPDATE;

-- name: LockOrganization :one
-- The organization, held against other changes to what it must keep (its
-- last admin key) until the transaction ends: two such changes take turns,
-- so the second sees the first's.
SELECT id FROM organizations WHERE id = sqlc.arg(id) FOR NO KEY UPDATE;

-- name: SetOrganizationLimits :one
-- Only an enterprise organization has limits of its own: checked in the
-- update itself, so that an operator's move to another plan at the same
-- moment (which clears them) cannot leave them set. No row otherwise.
UPDATE organizations
SET custom_requests_per_minute = sqlc.arg(requests_per_minute),
    custom_requests_per_day = sqlc.arg(requests_per_day)
WHERE id = sqlc.arg(id) AND plan = 'enterprise'
RETURNING *;

-- name: ListPlans :many
SELECT * FROM plans;

-- name: CountAgents :one
SELECT count(*) FROM agents WHERE org_id = sqlc.arg(org_id);

-- name: CommandLineOrganizations :many
-- A page of every organization's id, by id after the cursor: read in a
-- transaction of `parley admin` (db.Store.CommandLineOrganizations,
-- migration 00037's policy), which walks them all.
SELECT id FROM organizations
WHERE id > sqlc.arg(after)::uuid
ORDER BY id
LIMIT sqlc.arg(max_rows);

-- Deleting an organization (account.DeleteOrg, `parley admin delete-org`):
-- first what lets anyone in, then its bulk in batches of batch_rows rows,
-- each its own short transaction, and last the organization's row, whose
-- cascade takes what is left.
--
-- A batch names its rows by ctid: the deletion then fetches them by their
-- place (a Tid Scan). Named by key, `(org_id, id) IN (subquery)`, the
-- planner joined the batch to the whole table (a hash semi join over a
-- sequential scan of every organization's rows), 0.1-0.2 s a batch at
-- 200,000-500,000 rows and growing with the table (docs/benchmarks.md,
-- "Deleting a large organization"). Only the organization's rows are
-- named (the batch's org_id), and row-level security holds the delete to
-- them as well; an explicit org_id beside ctid let the planner read the
-- organization's rows instead on a small table.
--
-- A batch says how many rows it found as well as how many it deleted: a
-- row another transaction updated meanwhile is not deleted (its place
-- changed) and is found again by the next batch, so only a batch that
-- finds less than batch_rows ends its step. (Waiting instead for one that
-- deleted none, a visitor of a public agent or published form writing
-- between every two batches kept the deletion going for as long as they
-- wrote.)
-- The places are taken once, in the statement's snapshot, and given to
-- ANY as an array (the cast: ANY of a subquery would compare each place
-- with the whole array).

-- name: DeleteOrgAPIKeys :execrows
DELETE FROM api_keys WHERE org_id = sqlc.arg(org_id);

-- name: DeleteOrgMemberLinks :execrows
DELETE FROM member_links WHERE org_id = sqlc.arg(org_id);

-- name: DeleteOrgMembers :execrows
DELETE FROM members WHERE org_id = sqlc.arg(org_id);

-- name: DeleteOrgMessages :one
WITH batch AS (SELECT ARRAY(SELECT ctid FROM messages WHERE org_id = sqlc.arg(org_id)::uuid LIMIT sqlc.arg(batch_rows)::int) AS places),
d AS (DELETE FROM messages WHERE ctid = ANY((SELECT places FROM batch)::tid[]) RETURNING 1)
SELECT cardinality(places)::bigint AS found, (SELECT count(*) FROM d)::bigint AS deleted FROM batch;

-- name: DeleteOrgConversationEvents :one
WITH batch AS (SELECT ARRAY(SELECT ctid FROM conversation_events WHERE org_id = sqlc.arg(org_id)::uuid LIMIT sqlc.arg(batch_rows)::int) AS places),
d AS (DELETE FROM conversation_events WHERE ctid = ANY((SELECT places FROM batch)::tid[]) RETURNING 1)
SELECT cardinality(places)::bigint AS found, (SELECT count(*) FROM d)::bigint AS deleted FROM batch;

-- name: DeleteOrgConversations :one
WITH batch AS (SELECT ARRAY(SELECT ctid FROM conversations WHERE org_id = sqlc.arg(org_id)::uuid LIMIT sqlc.arg(batch_rows)::int) AS places),
d AS (DELETE FROM conversations WHERE ctid = ANY((SELECT places FROM batch)::tid[]) RETURNING 1)
SELECT cardinality(places)::bigint AS found, (SELECT count(*) FROM d)::bigint AS deleted FROM batch;

-- name: DeleteOrgWebhookAttempts :one
WITH batch AS (SELECT ARRAY(SELECT ctid FROM webhook_attempts WHERE org_id = sqlc.arg(org_id)::uuid LIMIT sqlc.arg(batch_rows)::int) AS places),
d AS (DELETE FROM webhook_attempts WHERE ctid = ANY((SELECT places FROM batch)::tid[]) RETURNING 1)
SELECT cardinality(places)::bigint AS found, (SELECT count(*) FROM d)::bigint AS deleted FROM batch;

-- name: DeleteOrgWebhookDeliveries :one
WITH batch AS (SELECT ARRAY(SELECT ctid FROM webhook_deliveries WHERE org_id = sqlc.arg(org_id)::uuid LIMIT sqlc.arg(batch_rows)::int) AS places),
d AS (DELETE FROM webhook_deliveries WHERE ctid = ANY((SELECT places FROM batch)::tid[]) RETURNING 1)
SELECT cardinality(places)::bigint AS found, (SELECT count(*) FROM d)::bigint AS deleted FROM batch;

-- name: DeleteOrgFormSubmissions :one
WITH batch AS (SELECT ARRAY(SELECT ctid FROM form_submissions WHERE org_id = sqlc.arg(org_id)::uuid LIMIT sqlc.arg(batch_rows)::int) AS places),
d AS (DELETE FROM form_submissions WHERE ctid = ANY((SELECT places FROM batch)::tid[]) RETURNING 1)
SELECT cardinality(places)::bigint AS found, (SELECT count(*) FROM d)::bigint AS deleted FROM batch;

-- name: DeleteOrgContacts :one
WITH batch AS (SELECT ARRAY(SELECT ctid FROM contacts WHERE org_id = sqlc.arg(org_id)::uuid LIMIT sqlc.arg(batch_rows)::int) AS places),
d AS (DELETE FROM contacts WHERE ctid = ANY((SELECT places FROM batch)::tid[]) RETURNING 1)
SELECT cardinality(places)::bigint AS found, (SELECT count(*) FROM d)::bigint AS deleted FROM batch;

-- name: OrgDatasourceBatch :many
-- The next datasources to delete together: in id order, as many as hold
-- batch_rows chunks, and at least one, but never more than batch_rows
-- datasources: one not yet synced counts no chunk (chunk_count is set as
-- it syncs), and an organization's thousands of pending or failed ones,
-- each with its file in content, went in one transaction. Their chunks go
-- by cascade, with the datasource's row: deleted apart in batches, each
-- batch made the chunks trigger index the datasource's remaining text
-- again (parley_chunk_text_index).
SELECT d.id FROM (
  SELECT s.id, sum(s.chunk_count) OVER (ORDER BY s.id) - s.chunk_count AS before
  FROM datasources s WHERE s.org_id = sqlc.arg(org_id)
) d
WHERE d.before < sqlc.arg(batch_rows)::bigint
ORDER BY d.id
LIMIT sqlc.arg(batch_rows)::bigint;

-- name: DeleteOrgDatasources :one
WITH d AS (
  DELETE FROM datasources WHERE org_id = sqlc.arg(org_id) AND id = ANY(sqlc.arg(ids)::uuid[])
  RETURNING chunk_count
)
SELECT count(*)::bigint AS datasources, coalesce(sum(chunk_count), 0)::bigint AS chunks FROM d;

-- name: DeleteOrgAgents :execrows
DELETE FROM agents WHERE org_id = sqlc.arg(org_id);

-- name: DeleteOrgDatastores :execrows
DELETE FROM datastores WHERE org_id = sqlc.arg(org_id);

-- name: DeleteOrgForms :execrows
DELETE FROM forms WHERE org_id = sqlc.arg(org_id);

-- name: DeleteOrgWebhooks :execrows
DELETE FROM webhooks WHERE org_id = sqlc.arg(org_id);

-- name: DeleteOrganization :execrows
-- Last: its cascade takes every row left (usage_deleted, conversation
-- follows, anything written since its batch was deleted).
DELETE FROM organizations WHERE id = sqlc.arg(id);
