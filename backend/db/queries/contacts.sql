-- Contacts: one per email (else phone number) per organization, merged by
-- backend/contact. Every query names its organization, beside RLS.

-- name: GetContact :one
SELECT * FROM contacts WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: LockContactAgents :exec
-- Takes the agents of a contact's conversations (FOR KEY SHARE, in id
-- order) before DeleteContact unlinks them: DeleteAgent takes its agent,
-- then deletes its conversations in one order, and the unlinking (ON
-- DELETE SET NULL) updates them in another (conversations_org_contact's);
-- the two deadlocked on two conversations they shared. Taken first here,
-- as every other writer of a conversation takes its agent, the agent's
-- deletion waits for the contact's, or the contact's for the agent's.
SELECT a.id FROM agents a
WHERE a.org_id = sqlc.arg(org_id)
  AND a.id IN (SELECT c.agent_id FROM conversations c
               WHERE c.org_id = sqlc.arg(org_id) AND c.contact_id = sqlc.arg(contact_id)::uuid)
ORDER BY a.id
FOR KEY SHARE OF a;

-- name: LockContactConversations :exec
-- Takes the contact (FOR UPDATE, as its deletion would), then its
-- conversations (FOR NO KEY UPDATE, as the unlinking would, in id order),
-- after their agents and before their answers (ForgetContactLeadCaptures).
-- A conversation's deletion takes the conversation, then its messages (the
-- cascade); the answers taken first, the two deadlocked on a conversation
-- and one of its answers. A chat turn takes the contact (its merge), then
-- the conversation it links: the contact comes first here too.
WITH k AS MATERIALIZED (
  SELECT id FROM contacts WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(contact_id)::uuid FOR UPDATE)
SELECT c.id FROM conversations c
WHERE c.org_id = sqlc.arg(org_id) AND c.contact_id = (SELECT k.id FROM k)
ORDER BY c.id
FOR NO KEY UPDATE OF c;

-- name: ForgetContactLeadCaptures :many
-- Takes the details out of the lead_capture calls (messages.tool_calls,
-- protojson ToolCalls) that recorded a contact, run before DeleteContact: a
-- call's arguments and result hold the email, phone number, name and note
-- it recorded, and the history, its exports and its stream's replays
-- returned them after the contact was deleted. A call recorded the
-- contact when it is in one of the contact's conversations, or when it
-- names the contact's email (its arguments, quoted, or its result's
-- "contact recorded: email ..."), or, for a contact without an email, its
-- result names the contact's phone number: a conversation whose visitor gave
-- another email later names the later contact only. The call stays (its
-- id, name and status); other calls are untouched. The answers are locked
-- in id order, as ForgetCitedText's batches take them.
WITH k AS MATERIALIZED (
  SELECT ct.email, ct.phone_number FROM contacts ct
  WHERE ct.org_id = sqlc.arg(org_id) AND ct.id = sqlc.arg(contact_id)::uuid),
linked AS MATERIALIZED (
  SELECT c.id FROM conversations c
  WHERE c.org_id = sqlc.arg(org_id) AND c.contact_id = sqlc.arg(contact_id)::uuid),
-- hits are the calls (answer, position) that recorded the contact and
-- still hold details: tool calls are written with their answer, so the
-- positions read here are the ones the update finds.
hits AS MATERIALIZED (
  SELECT m.id, e.n FROM messages m, jsonb_array_elements(m.tool_calls) WITH ORDINALITY AS e(c, n)
  WHERE m.org_id = sqlc.arg(org_id)
    AND m.role = 'assistant'
    -- messages_org_lead_capture's predicate (migration 00033).
    AND m.tool_calls @> '[{"name": "lead_capture"}]'
    AND e.c->>'name' = 'lead_capture'
    AND (coalesce(e.c->>'arguments', '') <> '{}' OR coalesce(e.c->>'result', '') <> sqlc.arg(result)::text)
    AND (m.conversation_id IN (SELECT linked.id FROM linked)
         OR EXISTS (SELECT 1 FROM k WHERE parley_lead_call_names(e.c, k.email, k.phone_number)))),
held AS (
  SELECT m.id FROM messages m
  WHERE m.org_id = sqlc.arg(org_id) AND m.id IN (SELECT hits.id FROM hits)
  ORDER BY m.id
  FOR UPDATE OF m)
UPDATE messages m SET tool_calls = (
  SELECT jsonb_agg(CASE WHEN EXISTS (SELECT 1 FROM hits WHERE hits.id = m.id AND hits.n = e.n)
                        THEN e.c || jsonb_build_object('arguments', '{}', 'result', sqlc.arg(result)::text)
                        ELSE e.c END ORDER BY e.n)
  FROM jsonb_array_elements(m.tool_calls) WITH ORDINALITY AS e(c, n))
FROM held
WHERE m.org_id = sqlc.arg(org_id) AND m.id = held.id
RETURNING m.id;

-- name: DeleteContact :execrows
-- Its conversations stay, without it (the foreign key sets their
-- contact_id to null).
DELETE FROM contacts WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: ContactByEmail :one
SELECT * FROM contacts WHERE org_id = sqlc.arg(org_id) AND email = sqlc.arg(email);

-- name: ContactByPhone :one
-- The contact with this phone number: the one kept by it (no email) first,
-- else the one updated last.
SELECT * FROM contacts
WHERE org_id = sqlc.arg(org_id) AND phone_number = sqlc.arg(phone_number)
ORDER BY (email IS NULL) DESC, updated_at DESC, id DESC
LIMIT 1;

-- name: InsertContact :one
-- No row when a concurrent request created the contact first (its email, or
-- its phone number without email, is taken): the caller looks it up again.
INSERT INTO contacts (org_id, id, email, phone_number, first_name, last_name, custom_fields, notes)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.narg(email), sqlc.narg(phone_number), sqlc.arg(first_name),
        sqlc.arg(last_name), sqlc.arg(custom_fields), sqlc.arg(note))
ON CONFLICT DO NOTHING
RETURNING id;

-- name: MergeContact :one
-- Adds what is new to a contact: an email or phone number it lacks (or a
-- new phone number), names that are not empty, custom fields over the old
-- ones, and a note after the others unless they hold it already (the last
-- 10,000 characters are kept).
-- With fill_only (what f brings is unverified, contact.Fields) it changes
-- nothing stored and takes at most half of a contact's room, so that what
-- the organization writes itself always fits: a phone number, names and
-- custom fields only where the contact has none (the custom fields only
-- while they stay within 16 KiB of JSON), and a note only while the notes
-- stay within 5,000 characters.
UPDATE contacts SET
  email = coalesce(sqlc.narg(email), email),
  phone_number = CASE WHEN sqlc.arg(fill_only)::boolean THEN coalesce(phone_number, sqlc.narg(phone_number))
                      ELSE coalesce(sqlc.narg(phone_number), phone_number) END,
  first_name = CASE WHEN sqlc.arg(first_name)::text <> '' AND (NOT sqlc.arg(fill_only) OR first_name = '')
                    THEN sqlc.arg(first_name)::text ELSE first_name END,
  last_name = CASE WHEN sqlc.arg(last_name)::text <> '' AND (NOT sqlc.arg(fill_only) OR last_name = '')
                   THEN sqlc.arg(last_name)::text ELSE last_name END,
  custom_fields = CASE WHEN NOT sqlc.arg(fill_only) THEN custom_fields || sqlc.arg(custom_fields)::jsonb
                       WHEN octet_length((sqlc.arg(custom_fields)::jsonb || custom_fields)::text) <= 16384
                       THEN sqlc.arg(custom_fields)::jsonb || custom_fields
                       ELSE custom_fields END,
  notes = CASE WHEN sqlc.arg(note)::text = '' THEN notes
               WHEN notes = '' THEN sqlc.arg(note)::text
               -- A note the notes already hold, as lines of their own: the
               -- model calling lead_capture again with all it knows (a
               -- detail added, a retry) adds nothing.
               WHEN position(E'\n' || sqlc.arg(note)::text || E'\n' IN E'\n' || notes || E'\n') > 0 THEN notes
               WHEN sqlc.arg(fill_only) AND length(notes) + 1 + length(sqlc.arg(note)::text) > 5000 THEN notes
               ELSE right(notes || E'\n' || sqlc.arg(note)::text, 10000) END,
  updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
  -- Never one email over another: a contact found without one may have
  -- been given one meanwhile (by a transaction this update waited for).
  -- No row then, as for a contact deleted meanwhile: the caller looks again.
  AND (sqlc.narg(email)::text IS NULL OR email IS NULL OR email = sqlc.narg(email))
RETURNING id;

-- name: LinkConversationContact :exec
-- Only the conversation created at conversation_created_at: one deleted and
-- started again under its id is another's.
UPDATE conversations SET contact_id = sqlc.arg(contact_id), updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(conversation_id)
  AND created_at = sqlc.arg(conversation_created_at);

-- name: ListContacts :many
-- A page of contacts, newest first: optionally one email, a text in the
-- name, email or phone number (an ILIKE pattern), and only those after the
-- cursor (the last row of the previous page).
SELECT * FROM contacts c
WHERE c.org_id = sqlc.arg(org_id)
  AND (sqlc.narg(email)::text IS NULL OR c.email = sqlc.narg(email))
  AND (sqlc.narg(pattern)::text IS NULL
       OR c.email ILIKE sqlc.narg(pattern) OR c.phone_number ILIKE sqlc.narg(pattern)
       OR (c.first_name || ' ' || c.last_name) ILIKE sqlc.narg(pattern))
  AND (sqlc.narg(before_time)::timestamptz IS NULL
       OR (c.created_at, c.id) < (sqlc.narg(before_time)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY c.created_at DESC, c.id DESC
LIMIT sqlc.arg(max_rows);

-- name: ContactConversations :many
-- The conversations linked to a contact, newest first.
SELECT id FROM conversations
WHERE org_id = sqlc.arg(org_id) AND contact_id = sqlc.arg(contact_id)
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_rows);

-- name: LockContactDeliveries :exec
-- Takes the deliveries that carry a contact (DeleteContactDeliveries,
-- UnlinkContactDeliveries), in a statement before those, as
-- LockSubmissionDeliveries takes a submission's: a replay of one (which
-- holds it FOR KEY SHARE while it copies its body) is waited for here, and
-- its copy is deleted or changed with the others.
SELECT 1 FROM webhook_deliveries
WHERE org_id = sqlc.arg(org_id) AND contact_id = sqlc.arg(contact_id)::text
ORDER BY id
FOR UPDATE;

-- name: DeleteContactDeliveries :execrows
-- The lead.created webhook deliveries of a contact, whose body, kept for
-- retries and replays, is the contact; with their attempts by the
-- cascade: deleted with the contact, a pending one is never sent. Taken
-- after LockWebhooksForForget, as an endpoint's deletion takes the
-- endpoint before its deliveries. Found by webhook_deliveries_contact
-- (migration 00034).
DELETE FROM webhook_deliveries
WHERE org_id = sqlc.arg(org_id) AND event_type = 'lead.created'
  AND contact_id = sqlc.arg(contact_id)::text;

-- name: UnlinkContactDeliveries :execrows
-- The conversation events' deliveries that carry a contact (their data is
-- the conversation's summary) lose it, as the conversations do: contact
-- null and contactId empty, as a summary without a contact is sent. The
-- rest of the body is unchanged (as JSON: jsonb's text writes its keys in
-- its own order, as ForgetDeliveredText's).
UPDATE webhook_deliveries SET body = convert_to(jsonb_set(jsonb_set(convert_from(body, 'UTF8')::jsonb,
    '{data,contact}', 'null'::jsonb), '{data,contactId}', '""'::jsonb)::text, 'UTF8')
WHERE org_id = sqlc.arg(org_id) AND event_type <> 'lead.created'
  AND contact_id = sqlc.arg(contact_id)::text;

-- name: LockLeadCaptureDeliveries :exec
-- Takes the message.created deliveries of the answers whose lead_capture
-- calls ForgetContactLeadCaptures changed, and those whose delivered
-- lead_capture calls name the contact (ForgetNamedLeadCaptureDeliveries),
-- in one statement (in id order) before ForgetDeliveredLeadCaptures and
-- that one, as LockContactDeliveries takes the contact's: a replay's copy
-- is waited for, and changed with the others.
SELECT 1 FROM webhook_deliveries d
WHERE d.org_id = sqlc.arg(org_id) AND d.lead_message_id IS NOT NULL
  AND (d.lead_message_id = ANY (sqlc.arg(message_ids)::text[])
       OR EXISTS (
         SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(convert_from(d.body, 'UTF8')::jsonb->'data'->'toolCalls') = 'array'
                                                 THEN convert_from(d.body, 'UTF8')::jsonb->'data'->'toolCalls' ELSE '[]'::jsonb END) AS e(c)
         WHERE e.c->>'name' = 'lead_capture'
           AND (coalesce(e.c->>'arguments', '') <> '{}' OR coalesce(e.c->>'result', '') <> sqlc.arg(result)::text)
           AND parley_lead_call_names(e.c, sqlc.narg(email)::text, sqlc.narg(phone_number)::text)))
ORDER BY d.id
FOR UPDATE;

-- name: ForgetDeliveredLeadCaptures :execrows
-- ForgetContactLeadCaptures for the bodies of the answers' message.created
-- deliveries, kept for retries and replays: a delivered lead_capture call
-- whose stored call (the same place in the answer's calls: both are the
-- turn's calls) is now forgotten loses its arguments and result as the
-- stored one did. The rest of the body is unchanged (as JSON: jsonb's text
-- writes its keys in its own order, as ForgetDeliveredText's). Found by
-- webhook_deliveries_lead_message (migration 00034).
UPDATE webhook_deliveries w SET body = convert_to(jsonb_set(x.j, '{data,toolCalls}', (
    SELECT jsonb_agg(CASE WHEN e.c->>'name' = 'lead_capture' AND x.calls->(e.n::int - 1)->>'result' = sqlc.arg(result)::text
                          THEN e.c || jsonb_build_object('arguments', '{}', 'result', sqlc.arg(result)::text)
                          ELSE e.c END ORDER BY e.n)
    FROM jsonb_array_elements(x.delivered) WITH ORDINALITY AS e(c, n)))::text, 'UTF8')
FROM (SELECT d.org_id, d.id, b.j, m.tool_calls AS calls,
             CASE WHEN jsonb_typeof(b.j->'data'->'toolCalls') = 'array' THEN b.j->'data'->'toolCalls' ELSE '[]'::jsonb END AS delivered
      FROM webhook_deliveries d
      CROSS JOIN LATERAL (SELECT convert_from(d.body, 'UTF8')::jsonb AS j) b
      JOIN messages m ON m.org_id = d.org_id AND m.id::text = d.lead_message_id
      WHERE d.org_id = sqlc.arg(org_id) AND d.lead_message_id = ANY (sqlc.arg(message_ids)::text[])
        AND m.id = ANY (sqlc.arg(message_ids)::text[]::uuid[])) x
WHERE w.org_id = x.org_id AND w.id = x.id
  AND EXISTS (SELECT 1 FROM jsonb_array_elements(x.delivered) WITH ORDINALITY AS e(c, n)
              WHERE e.c->>'name' = 'lead_capture' AND x.calls->(e.n::int - 1)->>'result' = sqlc.arg(result)::text
                AND (e.c->>'arguments' IS DISTINCT FROM '{}' OR e.c->>'result' IS DISTINCT FROM sqlc.arg(result)::text));

-- name: ForgetNamedLeadCaptureDeliveries :execrows
-- The delivered lead_capture calls that name a contact (its email, or its
-- phone number when it has no email: ForgetContactLeadCaptures' test)
-- lose their arguments and result, whether or not their answer is still
-- stored: an answer whose conversation was deleted keeps its delivery,
-- and ForgetDeliveredLeadCaptures, which reads the stored answer, never
-- reaches it. The rest of the body is unchanged (as JSON, as
-- ForgetDeliveredLeadCaptures'). Found by webhook_deliveries_lead_message
-- (migration 00034).
UPDATE webhook_deliveries w SET body = convert_to(jsonb_set(x.j, '{data,toolCalls}', (
    SELECT jsonb_agg(CASE WHEN x.named[e.n] THEN e.c || jsonb_build_object('arguments', '{}', 'result', sqlc.arg(result)::text)
                          ELSE e.c END ORDER BY e.n)
    FROM jsonb_array_elements(x.delivered) WITH ORDINALITY AS e(c, n)))::text, 'UTF8')
FROM (SELECT y.org_id, y.id, y.j, y.delivered,
             ARRAY(SELECT e.c->>'name' = 'lead_capture'
                     AND (coalesce(e.c->>'arguments', '') <> '{}' OR coalesce(e.c->>'result', '') <> sqlc.arg(result)::text)
                     AND parley_lead_call_names(e.c, sqlc.narg(email)::text, sqlc.narg(phone_number)::text)
                   FROM jsonb_array_elements(y.delivered) WITH ORDINALITY AS e(c, n) ORDER BY e.n) AS named
      FROM (SELECT d.org_id, d.id, b.j,
                   CASE WHEN jsonb_typeof(b.j->'data'->'toolCalls') = 'array' THEN b.j->'data'->'toolCalls' ELSE '[]'::jsonb END AS delivered
            FROM webhook_deliveries d
            CROSS JOIN LATERAL (SELECT convert_from(d.body, 'UTF8')::jsonb AS j) b
            WHERE d.org_id = sqlc.arg(org_id) AND d.lead_message_id IS NOT NULL) y) x
WHERE w.org_id = x.org_id AND w.id = x.id AND true = ANY (x.named);
