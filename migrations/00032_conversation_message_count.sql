-- +goose Up

-- A conversation counts its messages, so that an agent's stats
-- (AgentStats: on every read and write of an agent) read its conversations
-- alone. They joined them to every message and counted the distinct
-- conversations: 1.5 s for an agent of 100,000 conversations and 500,000
-- messages (docs/benchmarks.md, "Plans at volume"). The message's trigger
-- already updates its conversation (event_seq, updated_at); the count is
-- one more column of that update, in no index, so it stays heap-only.
-- Messages are deleted only with their conversation.
ALTER TABLE conversations ADD COLUMN message_count bigint NOT NULL DEFAULT 0;

-- Every organization's conversations: row-level security is lifted for the
-- count and set again before the migration's transaction commits (ALTER
-- TABLE's lock hides the interval from everyone else), as 00010 does.
ALTER TABLE conversations NO FORCE ROW LEVEL SECURITY;
ALTER TABLE messages NO FORCE ROW LEVEL SECURITY;
UPDATE conversations c SET message_count = m.n
FROM (SELECT org_id, conversation_id, count(*) AS n FROM messages GROUP BY 1, 2) m
WHERE c.org_id = m.org_id AND c.id = m.conversation_id;
ALTER TABLE messages FORCE ROW LEVEL SECURITY;
ALTER TABLE conversations FORCE ROW LEVEL SECURITY;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION parley_conversation_event(p_org uuid, p_conversation text, p_kind text, p_message uuid,
                                                     p_status text, p_reason text, p_author text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  s bigint;
BEGIN
  UPDATE conversations
  SET event_seq = event_seq + 1,
      updated_at = CASE WHEN p_kind = 'message' THEN now() ELSE updated_at END,
      message_count = message_count + CASE WHEN p_kind = 'message' THEN 1 ELSE 0 END
  WHERE org_id = p_org AND id = p_conversation
  RETURNING event_seq INTO s;
  IF s IS NULL THEN
    RETURN; -- the conversation is gone (deleted in this transaction)
  END IF;
  INSERT INTO conversation_events (org_id, conversation_id, seq, kind, message_id, status, reason, author)
  VALUES (p_org, p_conversation, s, p_kind, p_message, p_status, p_reason, p_author);
  IF EXISTS (SELECT 1 FROM conversation_follows f
             WHERE f.org_id = p_org AND f.conversation_id = p_conversation AND f.until > now()) THEN
    PERFORM pg_notify('parley_conversation', p_org::text || ' ' || s::text || ' ' || p_conversation);
  END IF;
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION parley_conversation_event(p_org uuid, p_conversation text, p_kind text, p_message uuid,
                                                     p_status text, p_reason text, p_author text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  s bigint;
BEGIN
  UPDATE conversations
  SET event_seq = event_seq + 1,
      updated_at = CASE WHEN p_kind = 'message' THEN now() ELSE updated_at END
  WHERE org_id = p_org AND id = p_conversation
  RETURNING event_seq INTO s;
  IF s IS NULL THEN
    RETURN; -- the conversation is gone (deleted in this transaction)
  END IF;
  INSERT INTO conversation_events (org_id, conversation_id, seq, kind, message_id, status, reason, author)
  VALUES (p_org, p_conversation, s, p_kind, p_message, p_status, p_reason, p_author);
  IF EXISTS (SELECT 1 FROM conversation_follows f
             WHERE f.org_id = p_org AND f.conversation_id = p_conversation AND f.until > now()) THEN
    PERFORM pg_notify('parley_conversation', p_org::text || ' ' || s::text || ' ' || p_conversation);
  END IF;
END $$;
-- +goose StatementEnd
ALTER TABLE conversations DROP COLUMN message_count;
