-- Webhooks, their deliveries and attempts (backend/webhook). Every query
-- names its organization, beside RLS.

-- name: CreateWebhook :one
INSERT INTO webhooks (org_id, id, url, description, events, secret)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(url), sqlc.arg(description), sqlc.arg(events)::text[], sqlc.arg(secret))
RETURNING *;

-- name: GetWebhook :one
SELECT * FROM webhooks WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: ListWebhooks :many
-- A page of webhooks, newest first, after the cursor.
SELECT * FROM webhooks
WHERE org_id = sqlc.arg(org_id)
  AND (sqlc.narg(before_time)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_time)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_rows);

-- name: SubscribedWebhooks :many
-- The enabled endpoints of org that receive event_type: what an event
-- costs when none does (webhooks_org_created's org_id prefix).
SELECT id FROM webhooks
WHERE org_id = sqlc.arg(org_id) AND enabled AND sqlc.arg(event_type)::text = ANY (events);

-- name: OrgHasWebhooks :one
-- Whether org has any enabled endpoint: what the Emitter caches so that an
-- organization without webhooks pays no query per event.
SELECT EXISTS (SELECT 1 FROM webhooks WHERE org_id = sqlc.arg(org_id) AND enabled);

-- name: UpdateWebhook :one
-- Sets what is given; null keeps the stored value.
UPDATE webhooks SET
  url = coalesce(sqlc.narg(url), url),
  description = coalesce(sqlc.narg(description), description),
  events = coalesce(sqlc.narg(events)::text[], events),
  enabled = coalesce(sqlc.narg(enabled), enabled),
  updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
RETURNING *;

-- name: SetWebhookSecret :execrows
UPDATE webhooks SET secret = sqlc.arg(secret), updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: DeleteWebhook :execrows
DELETE FROM webhooks WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: LockDeliveryWebhook :one
-- Locks a delivery's endpoint before anything of the delivery is written,
-- no row when the endpoint is gone: DeleteWebhook locks the endpoint and
-- then, by its cascade, its deliveries and their attempts; a worker that
-- wrote a delivery's rows first and updated its endpoint after (failing,
-- cleared) took them in the other order, and the two deadlocked. FOR NO
-- KEY UPDATE is what the worker's own update of the endpoint takes; an
-- event's deliveries (FOR KEY SHARE) are not held up by it.
SELECT id FROM webhooks
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
FOR NO KEY UPDATE;

-- name: LockWebhookDelivery :one
-- Locks a delivery after its endpoint (LockDeliveryWebhook), no row when
-- it is gone: deleted while it was sent, with its form submission (which
-- takes the endpoints, then the deliveries, in this order) or by
-- retention, its attempt has nothing left to be recorded against.
SELECT id FROM webhook_deliveries
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
FOR NO KEY UPDATE;

-- name: SetWebhookFailing :exec
-- A delivery used up its retries: the endpoint is failing from now (or
-- since it started).
UPDATE webhooks SET failing_since = coalesce(failing_since, now()), last_error = sqlc.arg(last_error)
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: ClearWebhookFailing :exec
UPDATE webhooks SET failing_since = NULL
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id) AND failing_since IS NOT NULL;

-- name: CreateWebhookDelivery :one
-- A delivery to an endpoint that still exists, no row when it does not:
-- the endpoint, read earlier in the transaction (SubscribedWebhooks,
-- GetWebhook) without a lock, may have been deleted since, and a plain
-- insert would then break the foreign key and fail the transaction that
-- emitted the event. Locking the endpoint FOR KEY SHARE here (the lock the
-- foreign key's check takes anyway) waits for a delete in progress and
-- then skips the row if it committed (READ COMMITTED); a delete that
-- starts later waits for this transaction and cascades to the delivery.
INSERT INTO webhook_deliveries (org_id, id, webhook_id, event_id, event_type, body)
SELECT w.org_id, sqlc.arg(id)::uuid, w.id, sqlc.arg(event_id)::text, sqlc.arg(event_type)::text, sqlc.arg(body)::bytea
FROM webhooks w
WHERE w.org_id = sqlc.arg(org_id) AND w.id = sqlc.arg(webhook_id)
FOR KEY SHARE
RETURNING *;

-- name: KeyShareWebhook :one
-- GetWebhook for a transaction that adds a delivery to the endpoint and
-- locks one of its deliveries (ReplayWebhookDelivery): the endpoint first,
-- as its deletion takes it before the deliveries it cascades to.
SELECT * FROM webhooks WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
FOR KEY SHARE;

-- name: KeyShareWebhookDelivery :one
-- A delivery whose body a replay copies, held until the copy commits: a
-- deletion of its form submission (LockSubmissionDeliveries) waits for the
-- copy and deletes it too, or, under way, is waited for (no row then).
SELECT * FROM webhook_deliveries WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
FOR KEY SHARE;

-- name: GetWebhookDelivery :one
SELECT * FROM webhook_deliveries WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: GetDeliveryTarget :one
-- What a delivery attempt needs: the delivery and its endpoint's URL,
-- state and sealed secret.
SELECT d.id, d.webhook_id, d.event_id, d.body, d.status, w.url, w.secret, w.enabled
FROM webhook_deliveries d
JOIN webhooks w ON w.org_id = d.org_id AND w.id = d.webhook_id
WHERE d.org_id = sqlc.arg(org_id) AND d.id = sqlc.arg(id);

-- name: ListWebhookDeliveries :many
SELECT * FROM webhook_deliveries
WHERE org_id = sqlc.arg(org_id) AND webhook_id = sqlc.arg(webhook_id)
  AND (sqlc.narg(before_time)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_time)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_rows);

-- name: SetWebhookDeliveryStatus :exec
UPDATE webhook_deliveries SET status = sqlc.arg(status), updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: RecordWebhookAttempt :exec
-- One attempt; River numbers them, and a rerun of a number (an attempt
-- cut before River recorded it) replaces the first.
INSERT INTO webhook_attempts (org_id, delivery_id, attempt, status_code, duration_ms, error)
VALUES (sqlc.arg(org_id), sqlc.arg(delivery_id), sqlc.arg(attempt), sqlc.arg(status_code), sqlc.arg(duration_ms), sqlc.arg(error))
ON CONFLICT (org_id, delivery_id, attempt) DO UPDATE
SET attempted_at = now(), status_code = EXCLUDED.status_code, duration_ms = EXCLUDED.duration_ms, error = EXCLUDED.error;

-- name: ListWebhookAttempts :many
-- The attempts of the given deliveries, oldest first.
SELECT * FROM webhook_attempts
WHERE org_id = sqlc.arg(org_id) AND delivery_id = ANY (sqlc.arg(delivery_ids)::uuid[])
ORDER BY delivery_id, attempt;

-- name: CountWebhooks :one
SELECT count(*) FROM webhooks WHERE org_id = sqlc.arg(org_id);

-- name: PruneWebhookDeliveries :execrows
-- Deletes up to max_rows of the oldest deliveries the transaction may see
-- as expired (db.Store.ExpiredDeliveries: the cutoff is in its scope and
-- in the expired_* policies, which the condition here repeats beside
-- RLS), with their attempts by the cascade. SKIP LOCKED: a delivery being
-- sent, or deleted with its endpoint, is left for the next run, so the
-- sweep never waits on, nor deadlocks with, an endpoint's deletion (whose
-- cascade takes them in another order).
DELETE FROM webhook_deliveries
WHERE (org_id, id) IN (
  SELECT org_id, id FROM webhook_deliveries
  WHERE created_at < sqlc.arg(before)::timestamptz
    AND (status <> 'pending' OR created_at < sqlc.arg(before)::timestamptz - interval '2 days')
  ORDER BY created_at
  LIMIT sqlc.arg(max_rows)
  FOR UPDATE SKIP LOCKED
);

-- name: LockWebhookSecrets :many
-- A batch of org's endpoints' sealed secrets, by id after the cursor,
-- held until the transaction ends (`parley admin reseal`): a rotation of a
-- secret meanwhile waits for the batch, or the batch for it, so that
-- neither writes over the other's with what it read before.
SELECT id, secret FROM webhooks
WHERE org_id = sqlc.arg(org_id) AND id > sqlc.arg(after)::uuid
ORDER BY id
LIMIT sqlc.arg(max_rows)
FOR NO KEY UPDATE;

-- name: ResealWebhookSecret :exec
-- The same secret sealed under another key: no change of the endpoint's,
-- so updated_at is kept.
UPDATE webhooks SET secret = sqlc.arg(secret)
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);
