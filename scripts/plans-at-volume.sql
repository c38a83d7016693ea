-- Fills a scratch database, migrated, with one large organization next to
-- 2,000 small ones, for reading query plans at volume (docs/benchmarks.md,
-- "Plans at volume"). Never run it against a real database: it writes as a
-- superuser with triggers and foreign-key checks off
-- (session_replication_role), to load 5 million rows in about 4 minutes.
--
--   createdb -O parley parley_plans
--   bin/parley migrate --database-url postgres://parley:parley@127.0.0.1:5432/parley_plans
--   psql -U postgres -d parley_plans -v ON_ERROR_STOP=1 -f scripts/plans-at-volume.sql
--
-- Organization 0 (md5('org0')::uuid) has 20 agents (agent 0 with half of
-- its conversations), 100,000 contacts, 200,000 conversations and their
-- 1,000,000 messages (some answers with a lead_capture call), 5 webhooks
-- with 500,000 deliveries (40 % form.submitted) and their attempts, 10
-- forms with 200,000 submissions, 10,000 API keys, 50 datastores of 100
-- datasources; each small organization a few of each. Then read the
-- queries as the app does: connect as parley, BEGIN, SELECT
-- set_config('app.org_id', md5('org0')::uuid::text, true), EXPLAIN ANALYZE.
SET session_replication_role = replica;
SET synchronous_commit = off;
SET maintenance_work_mem = '256MB';
CREATE OR REPLACE FUNCTION pg_temp.pu(t text) RETURNS uuid LANGUAGE sql IMMUTABLE AS $$ SELECT md5(t)::uuid $$;
-- orgs: 0 is big, 1..2000 small
INSERT INTO organizations (id, name, plan, created_at)
SELECT pg_temp.pu('org'||i), 'Org '||i, CASE WHEN i=0 THEN 'enterprise' ELSE 'free' END, now() - interval '400 days'
FROM generate_series(0,2000) i;
-- agents: big 20, small 2
INSERT INTO agents (org_id, id, name, instructions, model, temperature, created_at)
SELECT pg_temp.pu('org'||o), pg_temp.pu('agent'||o||'/'||a), 'Agent '||a, 'Be helpful', 'gpt-4o-mini', 0.5, now() - interval '390 days' + a * interval '1 hour'
FROM generate_series(0,2000) o, generate_series(0,19) a WHERE o = 0 OR a < 2;
-- members
INSERT INTO members (org_id, id, email, role, created_at)
SELECT pg_temp.pu('org'||o), pg_temp.pu('member'||o||'/'||k), 'm'||o||'_'||k||'@example.com', CASE WHEN k=0 THEN 'owner' ELSE 'admin' END, now() - interval '399 days'
FROM generate_series(0,2000) o, generate_series(0,49) k WHERE o = 0 OR k < 2;
-- contacts: big 100k, small 10
INSERT INTO contacts (org_id, id, email, phone_number, first_name, last_name, custom_fields, created_at, updated_at)
SELECT pg_temp.pu('org'||o), pg_temp.pu('contact'||o||'/'||k),
       CASE WHEN k % 5 <> 0 THEN 'user'||k||'.'||o||'@example.com' END,
       CASE WHEN k % 3 <> 1 OR k % 5 = 0 THEN '+1555'||lpad(k::text, 7, '0') END,
       (ARRAY['Ana','Bob','Chen','Dana','Eve','Farid','Gus','Hana','Ivan','Jo'])[1 + k % 10] || k,
       (ARRAY['Smith','Ng','Garcia','Khan','Muller','Rossi'])[1 + k % 6],
       jsonb_build_object('plan', 'p'||(k%4), 'source', 'web'),
       now() - (400 - 400.0 * k / CASE WHEN o=0 THEN 100000 ELSE 10 END) * interval '1 day',
       now() - (400 - 400.0 * k / CASE WHEN o=0 THEN 100000 ELSE 10 END) * interval '1 day'
FROM generate_series(0,2000) o, generate_series(0,99999) k WHERE o = 0 OR k < 10;
-- conversations: big 200k, small 50
INSERT INTO conversations (org_id, id, agent_id, visitor_id, status, channel, created_at, updated_at, contact_id, rating)
SELECT pg_temp.pu('org'||o), 'c'||o||'-'||k,
       pg_temp.pu('agent'||o||'/'||CASE WHEN o=0 THEN (CASE WHEN k%2=0 THEN 0 ELSE k%20 END) ELSE k%2 END),
       'v'||(k % 40000),
       CASE WHEN k%20 < 16 THEN 'resolved' WHEN k%20 < 19 THEN 'unresolved' ELSE 'human_requested' END,
       CASE WHEN k%20 < 12 THEN 'api' WHEN k%20 < 19 THEN 'website' ELSE 'whatsapp' END,
       now() - (365 - 365.0 * k / CASE WHEN o=0 THEN 200000 ELSE 50 END) * interval '1 day',
       now() - (365 - 365.0 * k / CASE WHEN o=0 THEN 200000 ELSE 50 END) * interval '1 day' + interval '10 minutes',
       CASE WHEN k%10 < 3 THEN pg_temp.pu('contact'||o||'/'||(k % CASE WHEN o=0 THEN 100000 ELSE 10 END)) END,
       CASE WHEN k%10 = 0 THEN 1 + (k/10)%5 END
FROM generate_series(0,2000) o, generate_series(0,199999) k WHERE o = 0 OR k < 50;
-- messages: 5 per conversation
INSERT INTO messages (org_id, id, conversation_id, role, content, created_at, model, provider, latency_ms, prompt_tokens, completion_tokens, cost, tool_calls)
SELECT c.org_id, pg_temp.pu(c.id||'/'||j||'/'||c.org_id), c.id,
       CASE WHEN j%2=0 THEN 'user' ELSE 'assistant' END,
       CASE WHEN j%2=0 THEN 'How do I reset my password for account '||j ELSE 'You can reset it from the settings page, under Security. Let me know if you need more help.' END,
       c.created_at + j * interval '1 minute',
       CASE WHEN j%2=1 THEN 'gpt-4o-mini' END, CASE WHEN j%2=1 THEN 'openai' END,
       CASE WHEN j%2=1 THEN 800 END, CASE WHEN j%2=1 THEN 500 END, CASE WHEN j%2=1 THEN 60 END, CASE WHEN j%2=1 THEN 0.0004 END,
       CASE WHEN j=1 AND c.contact_id IS NOT NULL AND hashtext(c.id) % 10 = 0
            THEN jsonb_build_array(jsonb_build_object('id','call1','name','lead_capture','arguments','{"email":"x@example.com"}','result','contact recorded: email x@example.com','status','ok'))
            ELSE '[]'::jsonb END
FROM conversations c, generate_series(0,4) j;
UPDATE conversations c SET updated_at = c.created_at + interval '4 minutes', message_count = 5, event_seq = 5;
-- usage_deleted
INSERT INTO usage_deleted (org_id, day, agent_id, turns, tokens, cost, tool_calls)
SELECT pg_temp.pu('org0'), current_date - d, pg_temp.pu('agent0/'||a), 3, 1500, 0.01, 0 FROM generate_series(0,364) d, generate_series(0,19) a;
-- webhooks: big 5, small 1
INSERT INTO webhooks (org_id, id, url, events, secret, created_at)
SELECT pg_temp.pu('org'||o), pg_temp.pu('wh'||o||'/'||w), 'https://hooks.example.com/'||o||'/'||w, ARRAY['form.submitted','conversation.created'], '\x00'::bytea, now() - interval '100 days'
FROM generate_series(0,2000) o, generate_series(0,4) w WHERE o=0 OR w=0;
-- forms: big 10, small 1
INSERT INTO forms (org_id, id, name, fields, published, created_at)
SELECT pg_temp.pu('org'||o), pg_temp.pu('form'||o||'/'||f), 'Form '||f, '[{"name":"email","type":"email"}]', true, now() - interval '300 days'
FROM generate_series(0,2000) o, generate_series(0,9) f WHERE o=0 OR f=0;
-- submissions: big 200k (form 0 gets half), small 10
INSERT INTO form_submissions (org_id, id, form_id, data, visitor_id, conversation_id, created_at)
SELECT pg_temp.pu('org'||o), pg_temp.pu('sub'||o||'/'||k), pg_temp.pu('form'||o||'/'||CASE WHEN o=0 THEN (CASE WHEN k%2=0 THEN 0 ELSE k%10 END) ELSE 0 END),
       jsonb_build_object('email','s'||k||'@example.com','name','Person '||k,'message','I would like a demo of the product please'),
       'v'||k, '', now() - (300 - 300.0*k/CASE WHEN o=0 THEN 200000 ELSE 10 END) * interval '1 day'
FROM generate_series(0,2000) o, generate_series(0,199999) k WHERE o=0 OR k<10;
-- deliveries: big 500k over the last 30 days (40% form.submitted), small 20
INSERT INTO webhook_deliveries (org_id, id, webhook_id, event_id, event_type, body, status, created_at, updated_at)
SELECT pg_temp.pu('org'||o), pg_temp.pu('del'||o||'/'||k), pg_temp.pu('wh'||o||'/'||CASE WHEN o=0 THEN k%5 ELSE 0 END), 'evt_'||o||'_'||k,
       CASE WHEN k%5 < 2 THEN 'form.submitted' ELSE 'conversation.created' END,
       convert_to(CASE WHEN k%5 < 2 THEN
         jsonb_build_object('id','evt_'||o||'_'||k,'type','form.submitted','createdAt',now(),'data',
           jsonb_build_object('id', pg_temp.pu('sub'||o||'/'||(k/2 % CASE WHEN o=0 THEN 200000 ELSE 10 END)),
                              'formId', pg_temp.pu('form'||o||'/'||CASE WHEN o=0 THEN (k/2 % 10) ELSE 0 END),
                              'data', jsonb_build_object('email','s'||k||'@example.com','name','Person '||k,'message','I would like a demo of the product please'),
                              'visitorId','v'||k,'createdAt',now()))::text
       ELSE jsonb_build_object('id','evt_'||o||'_'||k,'type','conversation.created','createdAt',now(),'data',
           jsonb_build_object('id','c'||o||'-'||k,'agentId',pg_temp.pu('agent'||o||'/0'),'channel','website','status','unresolved'))::text END, 'UTF8'),
       CASE WHEN k%50=0 THEN 'failed' ELSE 'succeeded' END,
       now() - (30 - 30.0*k/CASE WHEN o=0 THEN 500000 ELSE 20 END) * interval '1 day',
       now() - (30 - 30.0*k/CASE WHEN o=0 THEN 500000 ELSE 20 END) * interval '1 day'
FROM generate_series(0,2000) o, generate_series(0,499999) k WHERE o=0 OR k<20;
INSERT INTO webhook_attempts (org_id, delivery_id, attempt, attempted_at, status_code, duration_ms)
SELECT org_id, id, 1, created_at, 200, 120 FROM webhook_deliveries;
-- api keys: big 10k, small 20
INSERT INTO api_keys (org_id, id, name, key_hash, display_prefix, plan, scopes, created_at)
SELECT pg_temp.pu('org'||o), pg_temp.pu('key'||o||'/'||k), 'key '||k, sha256(('key'||o||'/'||k)::bytea), 'pk_'||left(md5(o||'/'||k),6),
       CASE WHEN o=0 THEN 'enterprise' ELSE 'free' END, ARRAY['all'], now() - (k||' hours')::interval
FROM generate_series(0,2000) o, generate_series(0,9999) k WHERE o=0 OR k<20;
-- datastores big 50, small 1; datasources big 5000 (100 each), small 2
INSERT INTO datastores (org_id, id, name, embedding_model, embedding_dim, created_at)
SELECT pg_temp.pu('org'||o), pg_temp.pu('ds'||o||'/'||d), 'Store '||d, 'parley-lexical-v1', 512, now() - (d||' days')::interval
FROM generate_series(0,2000) o, generate_series(0,49) d WHERE o=0 OR d=0;
INSERT INTO datasources (org_id, id, datastore_id, type, name, status, created_at, updated_at, chunk_count)
SELECT pg_temp.pu('org'||o), pg_temp.pu('src'||o||'/'||d||'/'||s), pg_temp.pu('ds'||o||'/'||d), 'text', 'Source '||s, 'synced', now() - (s||' hours')::interval, now() - (s||' hours')::interval, 20
FROM generate_series(0,2000) o, generate_series(0,49) d, generate_series(0,99) s WHERE o=0 OR (d=0 AND s<2);
INSERT INTO agent_datastores (org_id, agent_id, datastore_id)
SELECT pg_temp.pu('org'||o), pg_temp.pu('agent'||o||'/0'), pg_temp.pu('ds'||o||'/0') FROM generate_series(0,2000) o;
SET session_replication_role = origin;
VACUUM ANALYZE;
