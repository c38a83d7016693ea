-- A chat turn's statements as Parley sent them until 2026-11-25, in four
-- round trips (the question's insert and its commit each one), for
-- comparison with turn.sql. :org and :agent are set by
-- scripts/turn-sql-ceiling.sh; \startpipeline groups one round trip.
\set r random(1, 1000000000)
\startpipeline
BEGIN;
SELECT set_config('app.org_id', :org, true);
INSERT INTO conversations (org_id, id, agent_id, visitor_id, channel, contact_id) VALUES (:org, 'pgb-' || :client_id || '-' || :r, :agent, NULL, 'api', NULL) ON CONFLICT (org_id, id) DO NOTHING RETURNING org_id, id, agent_id, visitor_id, status, channel, created_at, updated_at, contact_id, rating, status_reason, status_by, status_changed_at, event_seq;
SELECT org_id, id, agent_id, visitor_id, status, channel, created_at, updated_at, contact_id, rating, status_reason, status_by, status_changed_at, event_seq FROM conversations WHERE org_id = :org AND id = 'pgb-' || :client_id || '-' || :r;
SELECT role, content, incomplete FROM messages WHERE org_id = :org AND conversation_id = 'pgb-' || :client_id || '-' || :r ORDER BY created_at DESC, id DESC LIMIT 20;
SELECT datastore_id FROM agent_datastores WHERE org_id = :org AND agent_id = :agent ORDER BY datastore_id;
\endpipeline
INSERT INTO messages (org_id, id, conversation_id, role, content, channel, attachments, sources, model, provider, latency_ms, prompt_tokens, completion_tokens, cost, incomplete, tool_calls) VALUES (:org, gen_random_uuid(), 'pgb-' || :client_id || '-' || :r, 'user', 'hello there, what are your hours?', 'api', '[]', '[]', NULL, NULL, NULL, NULL, NULL, NULL, false, '[]') RETURNING id, created_at;
COMMIT;
\startpipeline
BEGIN;
SELECT set_config('app.org_id', :org, true), set_config('synchronous_commit', 'off', true);
INSERT INTO messages (org_id, id, conversation_id, role, content, channel, attachments, sources, model, provider, latency_ms, prompt_tokens, completion_tokens, cost, incomplete, tool_calls) VALUES (:org, gen_random_uuid(), 'pgb-' || :client_id || '-' || :r, 'assistant', 'We open at nine and close at five.', 'api', '[]', '[]', 'm', 'openai', 12, 30, 10, 0.0001, false, '[]') RETURNING id, created_at;
COMMIT;
\endpipeline
