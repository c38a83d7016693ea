-- name: SearchConversations :many
-- A page of an organization's conversations, newest first, each with its
-- message count, latest message and contact; optionally one agent's, one
-- status, one visitor's, one channel's, those active since a time, and only
-- those after the cursor (the last row of the previous page). Callers read
-- by organization: org_id is filtered explicitly, beside RLS.
SELECT c.id, c.agent_id, c.created_at, c.updated_at, c.status, c.visitor_id, c.channel, c.rating,
       c.status_reason, c.status_by, c.contact_id,
       (SELECT count(*) FROM messages m WHERE m.org_id = c.org_id AND m.conversation_id = c.id)::bigint AS messages_count,
       coalesce((SELECT m.content FROM messages m WHERE m.org_id = c.org_id AND m.conversation_id = c.id
                 ORDER BY m.created_at DESC, m.id DESC LIMIT 1), '')::text AS last_message,
       ct.email AS contact_email, ct.phone_number AS contact_phone_number, ct.first_name AS contact_first_name,
       ct.last_name AS contact_last_name, ct.custom_fields AS contact_custom_fields
FROM conversations c
LEFT JOIN contacts ct ON ct.org_id = c.org_id AND ct.id = c.contact_id
WHERE c.org_id = sqlc.arg(org_id)
  AND (sqlc.narg(agent_id)::uuid IS NULL OR c.agent_id = sqlc.narg(agent_id))
  AND (sqlc.narg(visitor_id)::text IS NULL OR c.visitor_id = sqlc.narg(visitor_id))
  AND (sqlc.narg(status)::text IS NULL OR c.status = sqlc.narg(status))
  AND (sqlc.narg(channel)::text IS NULL OR c.channel = sqlc.narg(channel))
  AND (sqlc.narg(since)::timestamptz IS NULL OR c.updated_at >= sqlc.narg(since))
  AND (sqlc.narg(before_time)::timestamptz IS NULL
       OR (c.created_at, c.id) < (sqlc.narg(before_time)::timestamptz, sqlc.narg(before_id)::text))
ORDER BY c.created_at DESC, c.id DESC
LIMIT sqlc.arg(max_rows);

-- name: ConversationSummary :one
-- One conversation as its summary shows it.
SELECT c.id, c.agent_id, c.created_at, c.updated_at, c.status, c.visitor_id, c.channel, c.rating,
       c.status_reason, c.status_by, c.contact_id, c.event_seq,
       (SELECT count(*) FROM messages m WHERE m.org_id = c.org_id AND m.conversation_id = c.id)::bigint AS messages_count,
       coalesce((SELECT m.content FROM messages m WHERE m.org_id = c.org_id AND m.conversation_id = c.id
                 ORDER BY m.created_at DESC, m.id DESC LIMIT 1), '')::text AS last_message,
       ct.email AS contact_email, ct.phone_number AS contact_phone_number, ct.first_name AS contact_first_name,
       ct.last_name AS contact_last_name, ct.custom_fields AS contact_custom_fields
FROM conversations c
LEFT JOIN contacts ct ON ct.org_id = c.org_id AND ct.id = c.contact_id
WHERE c.org_id = sqlc.arg(org_id) AND c.id = sqlc.arg(id);

-- name: ConsoleTranscript :many
-- A conversation's messages, oldest first, with what the answers were made
-- from and who wrote people's replies: at most max_rows, and those that
-- start within the first max_bytes of the messages' text (the size of a
-- text is read from its header, not the text); total is how many the
-- conversation has.
SELECT id, role, content, created_at, sources, model, provider, latency_ms, prompt_tokens,
       completion_tokens, incomplete, author, tool_calls, total
FROM (
  SELECT m.*, sum(octet_length(m.content)) OVER (ORDER BY m.created_at, m.id) - octet_length(m.content) AS before,
         count(*) OVER () AS total
  FROM messages m
  WHERE m.org_id = sqlc.arg(org_id) AND m.conversation_id = sqlc.arg(conversation_id)
) t
WHERE before < sqlc.arg(max_bytes)::bigint
ORDER BY created_at, id
LIMIT sqlc.arg(max_rows);

-- name: LatestTranscript :many
-- A conversation's latest messages, oldest first, as ConsoleTranscript
-- reads them: at most max_rows, and those that end within the last
-- max_bytes of the messages' text; total is how many the conversation has.
-- People who have taken a conversation over need its end, where the
-- visitor's new messages are.
SELECT id, role, content, created_at, sources, model, provider, latency_ms, prompt_tokens,
       completion_tokens, incomplete, author, tool_calls, total
FROM (
  SELECT t.*
  FROM (
    SELECT m.*, sum(octet_length(m.content)) OVER (ORDER BY m.created_at DESC, m.id DESC) - octet_length(m.content) AS after,
           count(*) OVER () AS total
    FROM messages m
    WHERE m.org_id = sqlc.arg(org_id) AND m.conversation_id = sqlc.arg(conversation_id)
  ) t
  WHERE after < sqlc.arg(max_bytes)::bigint
  ORDER BY created_at DESC, id DESC
  LIMIT sqlc.arg(max_rows)
) latest
ORDER BY created_at, id;

-- name: SetConversationStatus :one
-- Changes a conversation's status, saying why and who; no row when it
-- already has that status (or does not exist). The trigger
-- conversations_status_event records the change and notifies.
--
-- The agent is taken first (FOR KEY SHARE), as DeleteAgent takes it before
-- the conversations it cascades to: the trigger writes the row a second
-- time, and that write checks the agent's key; checked only then, it
-- waited for a deletion of the agent that waited for this row.
UPDATE conversations c
SET status = sqlc.arg(status), status_reason = sqlc.arg(reason), status_by = sqlc.arg(changed_by),
    status_changed_at = now(), updated_at = now()
WHERE c.org_id = sqlc.arg(org_id) AND c.id = sqlc.arg(id) AND c.status <> sqlc.arg(status)
  AND c.agent_id = (SELECT a.id FROM conversations k
                    JOIN agents a ON a.org_id = k.org_id AND a.id = k.agent_id
                    WHERE k.org_id = sqlc.arg(org_id) AND k.id = sqlc.arg(id)
                    FOR KEY SHARE OF a)
RETURNING *;

-- name: LockConversationAgent :one
-- Takes a conversation's agent (FOR KEY SHARE: it cannot be deleted until
-- the transaction ends) before the transaction writes the conversation.
-- Every write of a conversation that is not its transaction's first checks
-- the agent's key, and DeleteAgent takes the agent before the
-- conversations: taken first here too, the two cannot deadlock. No row
-- when the conversation or its agent is gone (a deletion that was running
-- is waited for).
SELECT a.id FROM conversations c
JOIN agents a ON a.org_id = c.org_id AND a.id = c.agent_id
WHERE c.org_id = sqlc.arg(org_id) AND c.id = sqlc.arg(id)
FOR KEY SHARE OF a;

-- name: SetConversationRating :execrows
UPDATE conversations SET rating = sqlc.arg(rating)
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: CreateHumanMessage :one
-- A person's reply. The trigger messages_event records it and notifies.
INSERT INTO messages (org_id, id, conversation_id, role, content, channel, author)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(conversation_id), 'human', sqlc.arg(content),
        sqlc.arg(channel), sqlc.arg(author))
RETURNING id, created_at;

-- name: ConversationEvents :many
-- A conversation's events after one, in order, with their messages: the
-- conversation created at conversation_created_at only (a client's id
-- deleted and used again names another conversation, whose events are
-- numbered from 1 again), read in one snapshot with them. At most
-- max_rows, and those whose messages start within the first max_bytes of
-- their text (the first one always; the size of a text is read from its
-- header, not the text); fetched is how many of the max_rows were read
-- before that cut: more may follow when fewer are returned.
SELECT seq, kind, status, reason, changed_by, created_at, message_id, role, content, message_created_at,
       sources, model, incomplete, author, tool_calls, fetched
FROM (
  SELECT e.seq, e.kind, e.status, e.reason, e.author AS changed_by, e.created_at,
         m.id AS message_id, m.role, m.content, m.created_at AS message_created_at, m.sources, m.model,
         m.incomplete, m.author, m.tool_calls,
         coalesce(sum(octet_length(m.content)) OVER (ORDER BY e.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before,
         count(*) OVER () AS fetched
  FROM (
    SELECT * FROM conversation_events ce
    WHERE ce.org_id = sqlc.arg(org_id) AND ce.conversation_id = sqlc.arg(conversation_id)
      AND ce.seq > sqlc.arg(after_seq)
    ORDER BY ce.seq
    LIMIT sqlc.arg(max_rows)
  ) e
  JOIN conversations c ON c.org_id = e.org_id AND c.id = e.conversation_id
    AND c.created_at = sqlc.arg(conversation_created_at)
  LEFT JOIN messages m ON m.org_id = e.org_id AND m.id = e.message_id
) t
WHERE before < sqlc.arg(max_bytes)::bigint
ORDER BY seq;

-- name: APIKeyName :one
SELECT name FROM api_keys WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: ListenConversations :exec
-- The channel the conversation_events triggers notify on.
LISTEN parley_conversation;

-- name: FollowConversations :exec
-- Leases the conversations' notifications for lease_seconds from now, by
-- the database's clock (migration 00017); a conversation that no longer
-- exists is skipped.
INSERT INTO conversation_follows (org_id, conversation_id, until)
SELECT c.org_id, c.id, now() + make_interval(secs => sqlc.arg(lease_seconds)::float8)
FROM conversations c
WHERE c.org_id = sqlc.arg(org_id) AND c.id = ANY (sqlc.arg(ids)::text[])
ON CONFLICT (org_id, conversation_id) DO UPDATE SET until = greatest(conversation_follows.until, excluded.until);

-- name: DeleteConversation :execrows
-- Its messages, events and follows go by the cascade. created_at, when
-- given, is the creation time of the conversation the caller read: one
-- started since under the same id is not deleted.
DELETE FROM conversations WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
  AND (sqlc.narg(created_at)::timestamptz IS NULL OR created_at = sqlc.narg(created_at));
