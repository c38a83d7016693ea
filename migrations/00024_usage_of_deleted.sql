-- +goose Up

-- Usage (the console's overview: turns, tokens, cost and tool calls per
-- day and agent) is summed from the answers in messages, so deleting an
-- agent or a conversation took its usage with it: this month's cost went
-- down. Before a conversation is deleted (on its own, or with its agent),
-- its answers are summed per UTC day into usage_deleted, which the
-- overview adds to what messages still hold (backend/usage). Nothing is
-- kept of what was said; agent_id may name an agent deleted since.
CREATE TABLE usage_deleted (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  day date NOT NULL,
  agent_id uuid NOT NULL,
  turns bigint NOT NULL DEFAULT 0,
  tokens bigint NOT NULL DEFAULT 0,
  cost float8 NOT NULL DEFAULT 0,
  tool_calls bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (org_id, day, agent_id)
);
ALTER TABLE usage_deleted ENABLE ROW LEVEL SECURITY;
ALTER TABLE usage_deleted FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON usage_deleted
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());

-- +goose StatementBegin
CREATE FUNCTION parley_keep_usage() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  -- An organization being deleted keeps nothing (its row is gone first).
  IF NOT EXISTS (SELECT 1 FROM organizations WHERE id = OLD.org_id) THEN
    RETURN OLD;
  END IF;
  INSERT INTO usage_deleted AS u (org_id, day, agent_id, turns, tokens, cost, tool_calls)
  SELECT OLD.org_id, (m.created_at AT TIME ZONE 'UTC')::date, OLD.agent_id, count(*),
         coalesce(sum(coalesce(m.prompt_tokens, 0) + coalesce(m.completion_tokens, 0)), 0),
         coalesce(sum(m.cost), 0), coalesce(sum(jsonb_array_length(m.tool_calls)), 0)
  FROM messages m
  WHERE m.org_id = OLD.org_id AND m.conversation_id = OLD.id AND m.role = 'assistant'
  GROUP BY 2
  -- Days in one order, so that two deletions of one agent's
  -- conversations take its usage rows alike (no deadlock).
  ORDER BY 2
  ON CONFLICT (org_id, day, agent_id) DO UPDATE SET
    turns = u.turns + EXCLUDED.turns, tokens = u.tokens + EXCLUDED.tokens,
    cost = u.cost + EXCLUDED.cost, tool_calls = u.tool_calls + EXCLUDED.tool_calls;
  RETURN OLD;
END $$;
-- +goose StatementEnd
CREATE TRIGGER conversations_keep_usage BEFORE DELETE ON conversations
  FOR EACH ROW EXECUTE FUNCTION parley_keep_usage();

-- +goose Down
DROP TRIGGER conversations_keep_usage ON conversations;
DROP FUNCTION parley_keep_usage();
DROP TABLE usage_deleted;
