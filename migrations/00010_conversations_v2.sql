-- +goose Up

-- Conversations v2 and handoff to people (issue 9).
--
-- A conversation is rated (1 to 5) by its visitor or the organization, and
-- moves between the model and people: status human_requested silences the
-- model until someone resolves the conversation or gives it back. Who last
-- changed the status, and why, stays on the row (the inbox shows it).
ALTER TABLE conversations
  ADD COLUMN rating smallint CHECK (rating BETWEEN 1 AND 5),
  ADD COLUMN status_reason text NOT NULL DEFAULT '',
  ADD COLUMN status_by text NOT NULL DEFAULT '',
  ADD COLUMN status_changed_at timestamptz,
  -- The conversation's last event number (conversation_events.seq).
  ADD COLUMN event_seq bigint NOT NULL DEFAULT 0;
-- The organization-wide listing (GET /v2/conversations), newest first, and
-- the inbox (one status across the organization's agents).
CREATE INDEX conversations_org_created ON conversations (org_id, created_at DESC, id DESC);
CREATE INDEX conversations_org_status_created ON conversations (org_id, status, created_at DESC, id DESC);

-- A person's reply (role human) names who wrote it: an API key's name or a
-- console member's email. An answer keeps the tool calls the model made for
-- it (a JSON array of parley.v1.ToolCall).
ALTER TABLE messages DROP CONSTRAINT messages_role_check;
ALTER TABLE messages
  ADD CONSTRAINT messages_role_check CHECK (role IN ('user', 'assistant', 'system', 'tool', 'human')),
  ADD COLUMN author text NOT NULL DEFAULT '',
  ADD COLUMN tool_calls jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(tool_calls) = 'array');

-- What the visitor reads while people have the conversation ('' means the
-- default, "A person will answer here shortly.").
ALTER TABLE agents ADD COLUMN handoff_message text NOT NULL DEFAULT '';

-- A conversation's events, numbered 1, 2, ... per conversation: each new
-- message and each status change. Numbers are taken under the conversation
-- row's lock (UPDATE conversations SET event_seq = event_seq + 1), so within
-- a conversation they commit in order: a reader that has seen n has seen
-- every event below n. That makes seq the SSE event id (Last-Event-ID
-- resumption). Rows are written by the triggers below, whoever inserts the
-- message or changes the status, and each commit sends a NOTIFY on channel
-- parley_conversation ("<org id> <seq> <conversation id>") that every
-- instance's listener fans out to the streams following that conversation.
CREATE TABLE conversation_events (
  org_id uuid NOT NULL,
  conversation_id text NOT NULL,
  seq bigint NOT NULL,
  kind text NOT NULL CHECK (kind IN ('message', 'status')),
  message_id uuid,
  status text,
  reason text NOT NULL DEFAULT '',
  author text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, conversation_id, seq),
  FOREIGN KEY (org_id, conversation_id) REFERENCES conversations (org_id, id) ON DELETE CASCADE,
  CHECK ((kind = 'message') = (message_id IS NOT NULL)),
  CHECK ((kind = 'status') = (status IS NOT NULL))
);
ALTER TABLE conversation_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE conversation_events FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON conversation_events
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
CREATE POLICY operator_read ON conversation_events FOR SELECT USING ((SELECT parley_is_operator()));

-- +goose StatementBegin
CREATE FUNCTION parley_conversation_event(p_org uuid, p_conversation text, p_kind text, p_message uuid,
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
  PERFORM pg_notify('parley_conversation', p_org::text || ' ' || s::text || ' ' || p_conversation);
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION parley_message_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM parley_conversation_event(NEW.org_id, NEW.conversation_id, 'message', NEW.id, NULL, '', NEW.author);
  RETURN NULL;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION parley_status_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM parley_conversation_event(NEW.org_id, NEW.id, 'status', NULL, NEW.status, NEW.status_reason, NEW.status_by);
  RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER messages_event AFTER INSERT ON messages
  FOR EACH ROW EXECUTE FUNCTION parley_message_event();
-- The event's own UPDATE (event_seq only) does not fire this again.
CREATE TRIGGER conversations_status_event AFTER UPDATE OF status ON conversations
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION parley_status_event();

-- +goose Down
DROP TRIGGER conversations_status_event ON conversations;
DROP TRIGGER messages_event ON messages;
DROP FUNCTION parley_status_event();
DROP FUNCTION parley_message_event();
DROP FUNCTION parley_conversation_event(uuid, text, text, uuid, text, text, text);
DROP TABLE conversation_events;
ALTER TABLE agents DROP COLUMN handoff_message;
ALTER TABLE messages DROP COLUMN tool_calls, DROP COLUMN author;
-- People's replies become answers again. The app role owns messages but
-- FORCE makes it see no row without a tenant; lifting FORCE for the update
-- is invisible to others (ALTER TABLE holds an exclusive lock until the
-- migration's transaction commits, with FORCE back on).
ALTER TABLE messages DROP CONSTRAINT messages_role_check;
ALTER TABLE messages NO FORCE ROW LEVEL SECURITY;
UPDATE messages SET role = 'assistant' WHERE role = 'human';
ALTER TABLE messages FORCE ROW LEVEL SECURITY;
ALTER TABLE messages
  ADD CONSTRAINT messages_role_check CHECK (role IN ('user', 'assistant', 'system', 'tool'));
DROP INDEX conversations_org_status_created;
DROP INDEX conversations_org_created;
ALTER TABLE conversations
  DROP COLUMN event_seq, DROP COLUMN status_changed_at, DROP COLUMN status_by,
  DROP COLUMN status_reason, DROP COLUMN rating;
