-- Forms and their submissions (backend/form). Every query names its
-- organization, beside RLS, except GetPublicForm, which runs after
-- SetPublicForm in a transaction that knows no organization yet.

-- name: CreateForm :one
-- A NULL allowed_origins (a caller that has none) is stored as none.
INSERT INTO forms (org_id, id, name, description, fields, published, success_message, allowed_origins)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(name), sqlc.arg(description), sqlc.arg(fields),
        sqlc.arg(published), sqlc.arg(success_message), coalesce(sqlc.narg(allowed_origins)::text[], '{}'))
RETURNING *;

-- name: GetForm :one
SELECT * FROM forms WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: GetFormForSubmission :one
-- The form a submission is checked against, held (FOR SHARE) until the
-- submission is written: an update of its fields waits for it.
SELECT * FROM forms WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id) FOR SHARE;

-- name: SetPublicForm :exec
-- Lets the current transaction read the form with this id if it is
-- published, and its organization.
SELECT set_config('app.public_form_id', sqlc.arg(form_id)::text, true);

-- name: GetPublicForm :one
-- Run after SetPublicForm: the public_form policy shows the row only if the
-- form is published.
SELECT f.*,
       coalesce(o.custom_requests_per_minute, p.requests_per_minute)::int AS org_requests_per_minute,
       coalesce(o.custom_requests_per_day, p.requests_per_day)::int AS org_requests_per_day
FROM forms f
JOIN organizations o ON o.id = f.org_id
JOIN plans p ON p.id = o.plan
WHERE f.id = sqlc.arg(id);

-- name: ListForms :many
-- A page of forms, newest first, after the cursor (the last row of the
-- previous page).
SELECT * FROM forms
WHERE org_id = sqlc.arg(org_id)
  AND (sqlc.narg(before_time)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_time)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_rows);

-- name: CountFormSubmissions :many
-- The number of submissions of each of the given forms.
SELECT form_id, count(*)::bigint AS submissions
FROM form_submissions
WHERE org_id = sqlc.arg(org_id) AND form_id = ANY (sqlc.arg(form_ids)::uuid[])
GROUP BY form_id;

-- name: UpdateForm :one
-- Sets what is given; null keeps the stored value.
UPDATE forms SET
  name = coalesce(sqlc.narg(name), name),
  description = coalesce(sqlc.narg(description), description),
  fields = coalesce(sqlc.narg(fields), fields),
  published = coalesce(sqlc.narg(published), published),
  success_message = coalesce(sqlc.narg(success_message), success_message),
  allowed_origins = coalesce(sqlc.narg(allowed_origins)::text[], allowed_origins),
  updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
RETURNING *;

-- name: DeleteForm :execrows
DELETE FROM forms WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: CreateSubmission :one
INSERT INTO form_submissions (org_id, id, form_id, data, visitor_id, conversation_id)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(form_id), sqlc.arg(data), sqlc.arg(visitor_id),
        sqlc.arg(conversation_id))
RETURNING *;

-- name: DeleteSubmission :execrows
DELETE FROM form_submissions
WHERE org_id = sqlc.arg(org_id) AND form_id = sqlc.arg(form_id) AND id = sqlc.arg(id);

-- name: LockSubmissionDeliveries :exec
-- Takes the deliveries DeleteSubmissionDeliveries deletes, in a statement
-- before it: a replay of one (webhook.ReplayWebhookDelivery, which holds
-- it FOR KEY SHARE while it copies its body into a new delivery) is waited
-- for here, and its copy, committed before the DELETE's statement starts,
-- is deleted with the others. The DELETE alone waited for the replay and
-- missed its copy, which it could not see: the values were sent again.
SELECT 1 FROM webhook_deliveries
WHERE org_id = sqlc.arg(org_id) AND event_type = 'form.submitted'
  AND form_id = sqlc.arg(form_id)::text
  AND (sqlc.narg(submission_id)::text IS NULL OR submission_id = sqlc.narg(submission_id)::text)
ORDER BY id
FOR UPDATE;

-- name: DeleteSubmissionDeliveries :execrows
-- The form.submitted webhook deliveries that carried a form's submissions,
-- or one of them (submission_id; NULL: all of them), whose body, kept for
-- retries and replays, holds its values; with their attempts by the
-- cascade: deleted with the submission or the form, a pending one is
-- never sent. Taken after LockWebhooksForForget, as an endpoint's deletion
-- takes the endpoint before its deliveries. Found by
-- webhook_deliveries_form_submission (migration 00031: form_id and
-- submission_id are read from the body when it is written).
DELETE FROM webhook_deliveries
WHERE org_id = sqlc.arg(org_id) AND event_type = 'form.submitted'
  AND form_id = sqlc.arg(form_id)::text
  AND (sqlc.narg(submission_id)::text IS NULL OR submission_id = sqlc.narg(submission_id)::text);

-- name: ListSubmissions :many
-- A page of a form's submissions, newest first, after the cursor.
SELECT * FROM form_submissions
WHERE org_id = sqlc.arg(org_id) AND form_id = sqlc.arg(form_id)
  AND (sqlc.narg(before_time)::timestamptz IS NULL
       OR (created_at, id) < (sqlc.narg(before_time)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_rows);
