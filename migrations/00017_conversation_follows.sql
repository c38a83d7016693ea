-- +goose Up

-- A conversation's events notify only while someone follows it.
--
-- Every message and status change used to send a NOTIFY (migration 00010).
-- Postgres serialises the commits of all transactions that notify, across
-- the whole server (they take one lock from before their commit record is
-- written until it is on disk), so every chat turn's two commits queued
-- behind each other's disk flush, for streams that almost never exist:
-- make load measured about 35 % more chat turns a second without it
-- (docs/benchmarks.md). Now an instance's hub records the conversations
-- its streams follow here, renewing each row while a stream follows (until
-- is a lease: an instance that dies leaves rows that expire), and the
-- trigger notifies only for those. Events are written as before, followed
-- or not; a stream reads them from conversation_events.
CREATE TABLE conversation_follows (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  conversation_id text NOT NULL,
  until timestamptz NOT NULL,
  PRIMARY KEY (org_id, conversation_id),
  FOREIGN KEY (org_id, conversation_id) REFERENCES conversations (org_id, id) ON DELETE CASCADE
);
ALTER TABLE conversation_follows ENABLE ROW LEVEL SECURITY;
ALTER TABLE conversation_follows FORCE ROW LEVEL SECURITY;
-- Whoever writes a conversation's events writes them as its organization
-- (conversation_events' policy checks it), so the trigger sees that
-- organization's follows and no other.
CREATE POLICY tenant_isolation ON conversation_follows
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());

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
  PERFORM pg_notify('parley_conversation', p_org::text || ' ' || s::text || ' ' || p_conversation);
END $$;
-- +goose StatementEnd
DROP TABLE conversation_follows;
