-- name: ConsoleListConversations :many
-- A page of an agent's conversations, newest first, each with its message
-- count and latest message; optionally one status, one visitor, and only
-- those after the cursor (the last row of the previous page). The console's
-- members read by organization: org_id is filtered explicitly, beside RLS.
SELECT c.id, c.created_at, c.status, c.visitor_id, c.channel,
       (SELECT count(*) FROM messages m WHERE m.org_id = c.org_id AND m.conversation_id = c.id)::bigint AS messages_count,
       coalesce((SELECT m.content FROM messages m WHERE m.org_id = c.org_id AND m.conversation_id = c.id
                 ORDER BY m.created_at DESC, m.id DESC LIMIT 1), '')::text AS last_message
FROM conversations c
WHERE c.org_id = sqlc.arg(org_id) AND c.agent_id = sqlc.arg(agent_id)
  AND (sqlc.narg(visitor_id)::text IS NULL OR c.visitor_id = sqlc.narg(visitor_id))
  AND (sqlc.narg(status)::text IS NULL OR c.status = sqlc.narg(status))
  AND (sqlc.narg(before_time)::timestamptz IS NULL
       OR (c.created_at, c.id) < (sqlc.narg(before_time)::timestamptz, sqlc.narg(before_id)::text))
ORDER BY c.created_at DESC, c.id DESC
LIMIT sqlc.arg(max_rows);

-- name: ConsoleTranscript :many
-- A conversation's messages, oldest first, with what the answers were made
-- from.
SELECT id, role, content, created_at, sources, model, provider, latency_ms, prompt_tokens,
       completion_tokens, incomplete
FROM messages
WHERE org_id = sqlc.arg(org_id) AND conversation_id = sqlc.arg(conversation_id)
ORDER BY created_at, id
LIMIT sqlc.arg(max_rows);
