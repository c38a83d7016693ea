-- +goose Up

-- A message touches its conversation once, in place.
--
-- Each message updated its conversation twice (updated_at from the
-- message's insert, event_seq from its trigger), and updated_at was a
-- column of the index conversations_org_agent, so the first update could
-- never be a heap-only (HOT) one: every message wrote a new entry into each
-- of the conversations' seven indexes. Now the trigger sets both columns in
-- one update that changes no indexed column, and the pages keep room for
-- HOT updates (fillfactor 80). conversations_org_agent served only the
-- listing's "active since" filter, which now filters the organization's
-- conversations in creation order (the listing's order).
DROP INDEX conversations_org_agent;
ALTER TABLE conversations SET (fillfactor = 80);

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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION parley_conversation_event(p_org uuid, p_conversation text, p_kind text, p_message uuid,
                                                     p_status text, p_reason text, p_author text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  s bigint;
BEGIN
  UPDATE conversations SET event_seq = event_seq + 1
  WHERE org_id = p_org AND id = p_conversation
  RETURNING event_seq INTO s;
  IF s IS NULL THEN
    RETURN;
  END IF;
  INSERT INTO conversation_events (org_id, conversation_id, seq, kind, message_id, status, reason, author)
  VALUES (p_org, p_conversation, s, p_kind, p_message, p_status, p_reason, p_author);
  IF EXISTS (SELECT 1 FROM conversation_follows f
             WHERE f.org_id = p_org AND f.conversation_id = p_conversation AND f.until > now()) THEN
    PERFORM pg_notify('parley_conversation', p_org::text || ' ' || s::text || ' ' || p_conversation);
  END IF;
END $$;
-- +goose StatementEnd
ALTER TABLE conversations RESET (fillfactor);
CREATE INDEX conversations_org_agent ON conversations (org_id, agent_id, updated_at DESC);
