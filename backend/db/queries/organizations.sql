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
