-- +goose Up

-- The answers that recorded contacts (their lead_capture tool calls), by
-- organization: a contact's deletion takes the details out of them
-- (ForgetContactLeadCaptures), and found them by reading every answer of
-- the organization, 0.7 s at 1,000,000 messages (docs/benchmarks.md, "Plans
-- at volume"). Few answers call lead_capture, so the index is small. The
-- query repeats its predicate: a partial index needs only to be implied by
-- the query's conditions, which row-level security does not prevent (it
-- keeps conditions on functions that are not LEAKPROOF, @> among them, out
-- of an index's own conditions).
CREATE INDEX messages_org_lead_capture ON messages (org_id)
  WHERE role = 'assistant' AND tool_calls @> '[{"name": "lead_capture"}]';

-- +goose Down
DROP INDEX messages_org_lead_capture;
