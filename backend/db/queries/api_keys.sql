-- name: CreateAPIKey :one
INSERT INTO api_keys (org_id, id, name, key_hash, display_prefix, plan, scopes, expires_at, created_by, member)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(name), sqlc.arg(key_hash), sqlc.arg(display_prefix),
        sqlc.arg(plan), sqlc.arg(scopes), sqlc.narg(expires_at), sqlc.arg(created_by), sqlc.arg(member))
RETURNING *;

-- name: GetAPIKeyByHash :one
-- Authentication: run after SetKeyHash; the by_secret policy shows this row only.
SELECT k.id AS key_id, k.org_id, k.plan, k.scopes, k.expires_at, k.revoked_at,
       -- A key of a lower plan in an enterprise organization stays within
       -- the organization's own limits (the operator's may be below pro's).
       (CASE WHEN k.plan = 'enterprise' THEN coalesce(o.custom_requests_per_minute, p.requests_per_minute)
             WHEN o.plan = 'enterprise' THEN least(p.requests_per_minute, coalesce(o.custom_requests_per_minute, op.requests_per_minute))
             ELSE p.requests_per_minute END)::int AS requests_per_minute,
       (CASE WHEN k.plan = 'enterprise' THEN coalesce(o.custom_requests_per_day, p.requests_per_day)
             WHEN o.plan = 'enterprise' THEN least(p.requests_per_day, coalesce(o.custom_requests_per_day, op.requests_per_day))
             ELSE p.requests_per_day END)::int AS requests_per_day
FROM api_keys k
JOIN organizations o ON o.id = k.org_id
JOIN plans p ON p.id = k.plan
JOIN plans op ON op.id = o.plan
WHERE k.key_hash = sqlc.arg(key_hash);

-- name: ListAPIKeys :many
SELECT * FROM api_keys
WHERE org_id = sqlc.arg(org_id)
ORDER BY created_at DESC, id DESC;

-- name: ListWorkingAPIKeys :many
-- The keys that still work (at most MaxKeys, but for parley admin's):
-- revoked and expired keys accumulate, and have no usage worth reading.
SELECT * FROM api_keys
WHERE org_id = sqlc.arg(org_id) AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > now())
ORDER BY created_at DESC, id DESC;

-- name: RevokeAPIKey :one
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
RETURNING *;

-- name: TouchAPIKeys :exec
-- Records last use for a batch of one organization's keys. The rows are
-- locked in id order before any is updated (the join only reaches a row
-- the ordered lock took): every instance flushes the same keys, each in
-- its own order (a map's), and two flushes at once (at a shutdown of
-- several instances, each flushes at its end) locked them in orders that
-- crossed, and deadlocked, one of them losing its times.
WITH locked AS (
  SELECT l.id FROM api_keys l
  WHERE l.org_id = sqlc.arg(org_id) AND l.id = ANY (sqlc.arg(ids)::uuid[])
  ORDER BY l.id
  FOR UPDATE
)
UPDATE api_keys k SET last_used_at = greatest(k.last_used_at, u.used_at)
FROM (SELECT unnest(sqlc.arg(ids)::uuid[]) AS id, unnest(sqlc.arg(used_at)::timestamptz[]) AS used_at) AS u, locked
WHERE k.org_id = sqlc.arg(org_id) AND k.id = u.id AND locked.id = k.id;

-- name: CountLiveAdminKeys :one
-- Keys of the organization that can still manage it.
SELECT count(*) FROM api_keys
WHERE org_id = sqlc.arg(org_id) AND revoked_at IS NULL AND 'admin' = ANY(scopes)
  AND (expires_at IS NULL OR expires_at > now());

-- name: ActiveKeysOfMember :many
-- The keys that descend from a member (made by the member, or by one of
-- its keys, and so on) and still work: what an owner removing the member
-- is told of.
SELECT name, display_prefix FROM api_keys
WHERE org_id = sqlc.arg(org_id) AND member = sqlc.arg(member)
  AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
ORDER BY created_at DESC, id DESC;

-- name: APIKeyMaker :one
-- What a key issuing another passes on: its name and prefix (the new
-- key's created_by) and the member it descends from. No row for a key
-- that no longer works: another instance's cache may still trust a key
-- revoked a moment ago, and a key it issued would outlive the revocation.
SELECT name, display_prefix, member FROM api_keys
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
  AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now());

-- name: CountLiveKeys :one
-- Keys of the organization that still work (account.MaxKeys bounds them).
SELECT count(*) FROM api_keys
WHERE org_id = sqlc.arg(org_id) AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > now());

-- name: PageAPIKeys :many
-- A page of the organization's keys, revoked ones included, newest first,
-- after the cursor (the last row of the previous page).
SELECT * FROM api_keys
WHERE org_id = sqlc.arg(org_id)
  AND (sqlc.narg(before_time)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_time)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_rows);
