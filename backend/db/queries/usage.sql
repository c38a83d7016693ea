-- name: UsageByDayAndAgent :many
-- Chat turns (one assistant message each), tokens, cost and tool calls per UTC day and
-- agent since a time.
-- The answers still stored, and those of conversations deleted since
-- (usage_deleted, migration 00024).
SELECT day, agent_id, sum(turns)::bigint AS turns, sum(tokens)::bigint AS tokens,
       sum(cost)::float8 AS cost, sum(tool_calls)::bigint AS tool_calls
FROM (
  SELECT (m.created_at AT TIME ZONE 'UTC')::date AS day, c.agent_id,
         count(*)::bigint AS turns,
         coalesce(sum(coalesce(m.prompt_tokens, 0) + coalesce(m.completion_tokens, 0)), 0)::bigint AS tokens,
         coalesce(sum(m.cost), 0)::float8 AS cost,
         coalesce(sum(jsonb_array_length(m.tool_calls)), 0)::bigint AS tool_calls
  FROM messages m
  JOIN conversations c ON c.org_id = m.org_id AND c.id = m.conversation_id
  WHERE m.org_id = sqlc.arg(org_id) AND m.role = 'assistant' AND m.created_at >= sqlc.arg(since)
  GROUP BY 1, 2
  UNION ALL
  SELECT d.day, d.agent_id, d.turns, d.tokens, d.cost, d.tool_calls
  FROM usage_deleted d
  WHERE d.org_id = sqlc.arg(org_id) AND d.day >= (sqlc.arg(since)::timestamptz AT TIME ZONE 'UTC')::date
) u
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: AddDeletedUsage :exec
-- One turn's usage whose answer was not stored: its conversation deleted
-- while the model answered, or taken over by people (chat's CreateAnswer),
-- or a model call that ended without an answer yet was billed (turns 0:
-- no turn was answered). Counted as a deleted conversation's are: in the
-- organization's and the agent's totals, with no message of its own.
INSERT INTO usage_deleted AS u (org_id, day, agent_id, turns, tokens, cost, tool_calls)
VALUES (sqlc.arg(org_id), (now() AT TIME ZONE 'UTC')::date, sqlc.arg(agent_id), sqlc.arg(turns)::bigint,
        sqlc.arg(tokens), sqlc.arg(cost), sqlc.arg(tool_calls))
ON CONFLICT (org_id, day, agent_id) DO UPDATE SET
  turns = u.turns + EXCLUDED.turns, tokens = u.tokens + EXCLUDED.tokens,
  cost = u.cost + EXCLUDED.cost, tool_calls = u.tool_calls + EXCLUDED.tool_calls;
