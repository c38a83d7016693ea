-- name: SetPublicAgent :exec
-- Lets the current transaction read the agent with this id if it is public.
SELECT set_config('app.public_agent_id', sqlc.arg(agent_id)::text, true);

-- name: GetPublicAgent :one
-- Run after SetPublicAgent: the public_agent policy shows the row only if the
-- agent is public. The query says so too (RLS is the second wall, not the
-- first): a private agent is never a visitor's, whatever else the
-- transaction may see.
SELECT a.*, o.plan AS org_plan,
       coalesce(o.custom_requests_per_minute, p.requests_per_minute)::int AS org_requests_per_minute,
       coalesce(o.custom_requests_per_day, p.requests_per_day)::int AS org_requests_per_day
FROM agents a
JOIN organizations o ON o.id = a.org_id
JOIN plans p ON p.id = o.plan
WHERE a.id = sqlc.arg(id) AND a.visibility = 'public';

-- name: GetConversation :one
SELECT * FROM conversations WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: CreateConversation :one
-- No row when the id was taken meanwhile (a concurrent first message): the
-- caller reads the conversation again instead of failing its transaction.
INSERT INTO conversations (org_id, id, agent_id, visitor_id, channel, contact_id)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(agent_id), sqlc.narg(visitor_id), sqlc.arg(channel), sqlc.narg(contact_id))
ON CONFLICT (org_id, id) DO NOTHING
RETURNING *;

-- name: TouchConversation :exec
-- Takes the conversation's agent (FOR KEY SHARE) before the conversation:
-- the lock order of DeleteAgent (agent, then conversations by cascade).
-- Without it, a transaction that wrote the conversation once more after
-- this update (its message's trigger) checked the agent's key only then,
-- holding the conversation a deletion of the agent waited for: a deadlock.
-- No row is touched when the agent is gone (deleted meanwhile).
UPDATE conversations c
SET updated_at = now(), contact_id = coalesce(sqlc.narg(contact_id), c.contact_id)
WHERE c.org_id = sqlc.arg(org_id) AND c.id = sqlc.arg(id)
  AND c.agent_id = (SELECT a.id FROM conversations k
                    JOIN agents a ON a.org_id = k.org_id AND a.id = k.agent_id
                    WHERE k.org_id = sqlc.arg(org_id) AND k.id = sqlc.arg(id)
                    FOR KEY SHARE OF a);

-- name: ListMessages :many
-- The conversation's history, newest first (the prompt takes what fits).
SELECT role, content, incomplete FROM messages
WHERE org_id = sqlc.arg(org_id) AND conversation_id = sqlc.arg(conversation_id)
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_rows);

-- name: CreateMessage :one
-- Stores a message; its trigger numbers the conversation's event and
-- touches the conversation (updated_at), one update (migration 00018).
INSERT INTO messages (org_id, id, conversation_id, role, content, channel, attachments, sources,
                      model, provider, latency_ms, prompt_tokens, completion_tokens, cost, incomplete, tool_calls)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(conversation_id), sqlc.arg(role), sqlc.arg(content),
        sqlc.arg(channel), sqlc.arg(attachments), sqlc.arg(sources), sqlc.narg(model), sqlc.narg(provider),
        sqlc.narg(latency_ms), sqlc.narg(prompt_tokens), sqlc.narg(completion_tokens), sqlc.narg(cost),
        sqlc.arg(incomplete), coalesce(sqlc.narg(tool_calls)::jsonb, '[]'))
RETURNING id, created_at;

-- name: CreateAnswer :one
-- Stores a model's answer as CreateMessage does, unless people took the
-- conversation over while the model answered: status human_requested,
-- unless the answer's own turn handed it over (handed_over: its
-- request_human ran, and the status is still the agent's, handoff.ByAgent).
-- Another turn's request_human silences this one too: its answer would
-- come after the handoff message, and after any reply of the people who
-- took it (a person's reply leaves status_by as the agent set it). Then no
-- row, and nothing is stored. The conversation's row is locked first, so
-- that a person's reply or change of status is either committed before
-- (read here, newest version) or waits for the answer. The answer goes
-- only to the conversation its question went to, the one created at
-- conversation_created_at: one deleted meanwhile, or deleted and started
-- again under its id (by anyone, a visitor's contact on it), gets no row
-- either (chat tells the two cases apart). Nor does an answer that a
-- person's reply overtook: a reply stored after the turn read the
-- conversation (its events after seen_event_seq), which the model did not
-- see, even if people gave the conversation back or resolved it since
-- (the status alone let the late answer land after their words).
WITH conv AS (
  SELECT c.status, c.status_by FROM conversations c
  WHERE c.org_id = sqlc.arg(org_id) AND c.id = sqlc.arg(conversation_id)
    AND c.created_at = sqlc.arg(conversation_created_at)
  FOR UPDATE
)
INSERT INTO messages (org_id, id, conversation_id, role, content, channel, attachments, sources,
                      model, provider, latency_ms, prompt_tokens, completion_tokens, cost, incomplete, tool_calls)
SELECT sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(conversation_id), 'assistant', sqlc.arg(content),
       sqlc.arg(channel), '[]', sqlc.arg(sources), sqlc.narg(model), sqlc.narg(provider),
       sqlc.narg(latency_ms), sqlc.narg(prompt_tokens), sqlc.narg(completion_tokens), sqlc.narg(cost),
       sqlc.arg(incomplete), coalesce(sqlc.narg(tool_calls)::jsonb, '[]')
WHERE EXISTS (SELECT 1 FROM conv)
  AND NOT EXISTS (SELECT 1 FROM conv WHERE conv.status = 'human_requested'
                  AND (conv.status_by <> 'agent' OR NOT sqlc.arg(handed_over)::boolean))
  AND NOT EXISTS (SELECT 1 FROM conversation_events e
                  JOIN messages m ON m.org_id = e.org_id AND m.id = e.message_id
                  WHERE e.org_id = sqlc.arg(org_id) AND e.conversation_id = sqlc.arg(conversation_id)
                    AND e.seq > sqlc.arg(seen_event_seq)::bigint AND m.role = 'human')
RETURNING id, created_at;

-- name: ConversationTakenOver :one
-- What a turn reads between its model's rounds (chat's takenOver): the
-- conversation's creation, its status, and whether a person replied in it
-- after the events the turn read (seen_event_seq), as CreateAnswer checks.
SELECT c.created_at, c.status,
       EXISTS (SELECT 1 FROM conversation_events e
               JOIN messages m ON m.org_id = e.org_id AND m.id = e.message_id
               WHERE e.org_id = c.org_id AND e.conversation_id = c.id
                 AND e.seq > sqlc.arg(seen_event_seq)::bigint AND m.role = 'human') AS replied
FROM conversations c
WHERE c.org_id = sqlc.arg(org_id) AND c.id = sqlc.arg(id);

-- name: CreateTurnMessage :one
-- Stores a turn's message (the handoff message answering for people) as
-- CreateMessage does, only in the conversation the turn's question went to
-- (created at conversation_created_at, as CreateAnswer); no row otherwise.
-- The row is locked (FOR KEY SHARE, as the foreign key would) so that it
-- cannot be deleted and made again between the check and the insert.
INSERT INTO messages (org_id, id, conversation_id, role, content, channel, attachments, sources)
SELECT c.org_id, sqlc.arg(id), c.id, 'assistant', sqlc.arg(content), sqlc.arg(channel), '[]', '[]'
FROM conversations c
WHERE c.org_id = sqlc.arg(org_id) AND c.id = sqlc.arg(conversation_id)
  AND c.created_at = sqlc.arg(conversation_created_at)
FOR KEY SHARE OF c
RETURNING id, created_at;

-- name: CreateQuestion :one
-- Stores a turn's question in conversation_id when the turn may join it:
-- the conversation is of agent_id and, unless any_caller (an API key of the
-- organization), of visitor_id; no row otherwise, and nothing is stored
-- (chat's rule, sameCaller, decided in SQL so that the statement can travel
-- in the batch that reads the conversation). Its trigger touches the
-- conversation as CreateMessage's does.
INSERT INTO messages (org_id, id, conversation_id, role, content, channel, attachments, sources)
SELECT c.org_id, sqlc.arg(id), c.id, 'user', sqlc.arg(content), sqlc.arg(channel), sqlc.arg(attachments), '[]'
FROM conversations c
WHERE c.org_id = sqlc.arg(org_id) AND c.id = sqlc.arg(conversation_id) AND c.agent_id = sqlc.arg(agent_id)
  AND (sqlc.arg(any_caller)::bool OR c.visitor_id = sqlc.narg(visitor_id)::text)
RETURNING id, created_at;

-- name: ListConversations :many
-- Newest first, with each conversation's message count and latest message.
SELECT c.id, c.created_at, c.status, c.visitor_id, c.channel,
       (SELECT count(*) FROM messages m WHERE m.org_id = c.org_id AND m.conversation_id = c.id)::bigint AS messages_count,
       coalesce((SELECT m.content FROM messages m WHERE m.org_id = c.org_id AND m.conversation_id = c.id
                 ORDER BY m.created_at DESC, m.id DESC LIMIT 1), '')::text AS last_message
FROM conversations c
WHERE c.org_id = sqlc.arg(org_id) AND c.agent_id = sqlc.arg(agent_id)
  AND (sqlc.narg(visitor_id)::text IS NULL OR c.visitor_id = sqlc.narg(visitor_id))
ORDER BY c.created_at DESC, c.id DESC
LIMIT sqlc.arg(max_rows);
