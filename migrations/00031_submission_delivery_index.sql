-- +goose Up

-- The form.submitted deliveries of a form, or of one of its submissions,
-- found by index: deleting a submission or a form (LockSubmissionDeliveries,
-- DeleteSubmissionDeliveries) parsed the body of every delivery of the
-- organization to find them, about a second at 500,000 deliveries, twice a
-- deletion (docs/benchmarks.md, "Plans at volume"). An index on the
-- parsed body is no use there: row-level security keeps a condition on a
-- function that is not LEAKPROOF (which only a superuser may declare) from
-- the index, so the form's and the submission's ids are columns, computed
-- from the body when it is written.
--
-- parley_delivery_field is the body's data.<key> (the event's resource, in
-- the API's JSON). IMMUTABLE, as a generated column needs: convert_from is
-- STABLE only because a database's encoding could in principle differ, and
-- it never changes. Every form.submitted body is JSON that Parley wrote
-- (webhook.Emitter.payload).
CREATE FUNCTION parley_delivery_field(body bytea, key text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT convert_from(body, 'UTF8')::jsonb -> 'data' ->> key $$;

-- Text, as the body holds them: a cast that failed would fail the event's
-- transaction (a form's submission).
ALTER TABLE webhook_deliveries
  ADD COLUMN form_id text GENERATED ALWAYS AS (
    CASE WHEN event_type = 'form.submitted' THEN parley_delivery_field(body, 'formId') END) STORED,
  ADD COLUMN submission_id text GENERATED ALWAYS AS (
    CASE WHEN event_type = 'form.submitted' THEN parley_delivery_field(body, 'id') END) STORED;

CREATE INDEX webhook_deliveries_form_submission ON webhook_deliveries (org_id, form_id, submission_id)
  WHERE form_id IS NOT NULL;

-- +goose Down
DROP INDEX webhook_deliveries_form_submission;
ALTER TABLE webhook_deliveries DROP COLUMN submission_id, DROP COLUMN form_id;
DROP FUNCTION parley_delivery_field(bytea, text);
