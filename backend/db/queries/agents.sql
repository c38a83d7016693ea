-- name: CreateAgent :one
-- A NULL tool_settings (a caller that has none) is stored as no settings.
INSERT INTO agents (org_id, id, name, description, instructions, model, temperature, tools, visibility, tool_settings, handoff_message, allowed_origins)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(name), sqlc.arg(description), sqlc.arg(instructions),
        sqlc.arg(model), sqlc.arg(temperature), sqlc.arg(tools), sqlc.arg(visibility), coalesce(sqlc.narg(tool_settings)::jsonb, '{}'::jsonb), sqlc.arg(handoff_message),
        coalesce(sqlc.narg(allowed_origins)::text[], '{}'))
RETURNING *;

-- name: GetAgent :one
SELECT * FROM agents WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: LockAgent :one
-- The agent, held until the transaction ends: an update that keeps stored
-- header values reads them as they are when it writes, not as they were
-- before another update committed (a rotated value would come back).
SELECT * FROM agents WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id) FOR NO KEY UPDATE;

-- name: ListAgents :many
SELECT * FROM agents
WHERE org_id = sqlc.arg(org_id)
ORDER BY created_at DESC, id DESC
LIMIT sqlc.arg(max_rows) OFFSET sqlc.arg(skip_rows);

-- name: UpdateAgent :one
-- A NULL argument leaves its column as it is.
UPDATE agents SET
  name = coalesce(sqlc.narg(name), name),
  description = coalesce(sqlc.narg(description), description),
  instructions = coalesce(sqlc.narg(instructions), instructions),
  model = coalesce(sqlc.narg(model), model),
  temperature = coalesce(sqlc.narg(temperature), temperature),
  tools = coalesce(sqlc.narg(tools), tools),
  visibility = coalesce(sqlc.narg(visibility), visibility),
  handoff_message = coalesce(sqlc.narg(handoff_message), handoff_message),
  tool_settings = coalesce(sqlc.narg(tool_settings), tool_settings),
  allowed_origins = coalesce(sqlc.narg(allowed_origins)::text[], allowed_origins),
  updated_at = now()
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id)
RETURNING *;

-- name: DeleteAgent :execrows
DELETE FROM agents WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: AgentStats :one
-- average_rating is the mean rating of the agent's rated conversations.
-- The messages are counted by their conversations (message_count,
-- migration 00032), not read.
SELECT count(*)::bigint AS total_conversations,
       coalesce(sum(c.message_count), 0)::bigint AS total_messages,
       coalesce(avg(c.rating), 0)::double precision AS average_rating
FROM conversations c
WHERE c.org_id = sqlc.arg(org_id) AND c.agent_id = sqlc.arg(agent_id);

-- name: LockAgentToolSettings :many
-- A batch of org's agents that have http_request settings, by id after
-- the cursor, held until the transaction ends (`parley admin reseal`): an
-- update of the agent meanwhile waits for the batch, or the batch for it
-- (LockAgent), so that neither writes over the other's settings.
SELECT id, tool_settings FROM agents
WHERE org_id = sqlc.arg(org_id) AND id > sqlc.arg(after)::uuid
  AND tool_settings -> 'http_request' IS NOT NULL
ORDER BY id
LIMIT sqlc.arg(max_rows)
FOR NO KEY UPDATE;

-- name: ResealAgentToolSettings :exec
-- The same settings with their header values sealed under another key: no
-- change of the agent's, so updated_at is kept.
UPDATE agents SET tool_settings = sqlc.arg(tool_settings)
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);
