-- name: SetTenant :exec
-- Scopes the current transaction to one organization (RLS reads it).
SELECT set_config('app.org_id', sqlc.arg(org_id)::text, true);

-- name: SetKeyHash :exec
-- Lets the current transaction read the one API key with this hash.
SELECT set_config('app.key_hash', sqlc.arg(key_hash_hex)::text, true);

-- name: ResourceExists :one
SELECT EXISTS (SELECT 1 FROM resource_ids WHERE id = sqlc.arg(id) AND kind = sqlc.arg(kind));
