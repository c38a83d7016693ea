-- Platform operators' queries (backend/operator). Every one runs in a
-- transaction opened by db.Store.Operator: the operator_* policies of
-- migrations/00006_operator.sql admit its reads across organizations only if
-- the member it names is an operator.

-- name: SetOperatorID :exec
-- Names the member an operator transaction acts as (parley_is_operator reads it).
SELECT set_config('app.operator_id', sqlc.arg(member_id)::text, true);

-- name: IsOperator :one
SELECT parley_is_operator();

-- name: OperatorOrganizations :many
-- Every organization the transaction may read, with what the admin page
-- counts: members, unrevoked keys, chat turns (assistant messages) since a time
-- (a UTC midnight), those of conversations deleted since included, as
-- UsageByDayAndAgent counts them.
SELECT o.id, o.name, o.plan, o.created_at,
       (SELECT count(*) FROM members m WHERE m.org_id = o.id)::bigint AS members,
       (SELECT count(*) FROM api_keys k WHERE k.org_id = o.id AND k.revoked_at IS NULL)::bigint AS keys,
       ((SELECT count(*) FROM messages g
         WHERE g.org_id = o.id AND g.role = 'assistant' AND g.created_at >= sqlc.arg(since))
        + (SELECT coalesce(sum(d.turns), 0) FROM usage_deleted d
           WHERE d.org_id = o.id AND d.day >= (sqlc.arg(since)::timestamptz AT TIME ZONE 'UTC')::date))::bigint AS turns
FROM organizations o
ORDER BY o.created_at, o.id;

-- name: OperatorLockOrganization :one
SELECT * FROM organizations WHERE id = sqlc.arg(id) FOR UPDATE;

-- name: OperatorSetOrganizationPlan :exec
-- Custom limits are an enterprise organization's: they go when it leaves
-- enterprise (the audit keeps them).
UPDATE organizations
SET plan = sqlc.arg(plan),
    custom_requests_per_minute = CASE WHEN sqlc.arg(plan) = 'enterprise' THEN custom_requests_per_minute END,
    custom_requests_per_day = CASE WHEN sqlc.arg(plan) = 'enterprise' THEN custom_requests_per_day END
WHERE id = sqlc.arg(id);

-- name: LowerAPIKeyPlans :many
-- Brings an organization's keys down to plan where theirs is not among
-- allowed (the plans up to it); returns each key lowered with its old plan.
-- Run as the organization (SetTenant): tenant_isolation allows the update.
UPDATE api_keys k SET plan = sqlc.arg(plan)
FROM (SELECT a.id, a.plan FROM api_keys a
      WHERE a.org_id = sqlc.arg(org_id) AND NOT (a.plan = ANY (sqlc.arg(allowed)::text[]))
      FOR UPDATE) old
WHERE k.org_id = sqlc.arg(org_id) AND k.id = old.id
RETURNING k.id, k.name, old.plan AS old_plan;

-- name: OperatorLockPlan :one
SELECT * FROM plans WHERE id = sqlc.arg(id) FOR UPDATE;

-- name: OperatorSetPlanLimits :execrows
UPDATE plans SET requests_per_minute = sqlc.arg(requests_per_minute), requests_per_day = sqlc.arg(requests_per_day)
WHERE id = sqlc.arg(id);

-- name: OperatorSetPlanKnowledge :execrows
UPDATE plans SET knowledge_chunks = sqlc.arg(knowledge_chunks) WHERE id = sqlc.arg(id);

-- name: InsertOperatorAudit :exec
INSERT INTO operator_audit (id, operator_id, operator_email, action, target, detail)
VALUES (sqlc.arg(id), sqlc.arg(operator_id), sqlc.arg(operator_email), sqlc.arg(action), sqlc.arg(target), sqlc.arg(detail));

-- name: ListOperatorAudit :many
SELECT * FROM operator_audit ORDER BY at DESC, id DESC LIMIT sqlc.arg(max_rows);
