-- +goose Up

-- parley_lead_call_names reports whether a lead_capture call (a protojson
-- ToolCall) names the contact of email (lower case, as stored) in its
-- arguments, quoted, or its result's "contact recorded: email ...", or,
-- for a contact without an email, names phone in its result. The one test
-- of the stored calls (ForgetContactLeadCaptures) and the delivered ones
-- (LockLeadCaptureDeliveries, ForgetNamedLeadCaptureDeliveries).
-- +goose StatementBegin
CREATE FUNCTION parley_lead_call_names(c jsonb, email text, phone text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT coalesce(
    (email IS NOT NULL AND (
       position('"' || email || '"' IN lower(coalesce(c->>'arguments', ''))) > 0
       OR coalesce(c->>'result', '') = 'contact recorded: email ' || email
       OR starts_with(coalesce(c->>'result', ''), 'contact recorded: email ' || email || ',')))
    OR (email IS NULL AND phone IS NOT NULL AND (
       coalesce(c->>'result', '') = 'contact recorded: phone number ' || phone
       OR starts_with(coalesce(c->>'result', ''), 'contact recorded: phone number ' || phone || ','))),
    false)
$$;
-- +goose StatementEnd

-- The webhook deliveries that carry a contact, found by index, as 00031
-- finds a submission's: lead.created (its data is the contact) and the
-- conversation events (their data is the conversation's summary, with its
-- contact's email, phone number, name and custom fields). Their bodies are
-- kept for retries and replays until --webhook-retention ends; a contact's
-- deletion deletes its lead.created deliveries and unlinks it from the
-- others, as from its conversations (contact.Service.DeleteContact). The
-- contact's id is a column computed from the body when it is written, for
-- the reason 00031 gives (row-level security keeps a condition on the
-- parsed body from an index).
--
-- lead_message_id is the answer's id in a message.created delivery whose
-- toolCalls name lead_capture: its calls' arguments and results hold the
-- details they recorded, which the contact's deletion takes out of them as
-- out of the stored answer (ForgetContactLeadCaptures). The body is parsed
-- only when it names the tool (a byte search), not for every answer.
ALTER TABLE webhook_deliveries
  ADD COLUMN contact_id text GENERATED ALWAYS AS (
    CASE WHEN event_type = 'lead.created' THEN parley_delivery_field(body, 'id')
         WHEN event_type IN ('conversation.created', 'conversation.human_requested', 'conversation.resolved')
           THEN nullif(parley_delivery_field(body, 'contactId'), '') END) STORED,
  ADD COLUMN lead_message_id text GENERATED ALWAYS AS (
    CASE WHEN event_type = 'message.created' AND position('"lead_capture"'::bytea IN body) > 0
      THEN parley_delivery_field(body, 'id') END) STORED;

CREATE INDEX webhook_deliveries_contact ON webhook_deliveries (org_id, contact_id)
  WHERE contact_id IS NOT NULL;
CREATE INDEX webhook_deliveries_lead_message ON webhook_deliveries (org_id, lead_message_id)
  WHERE lead_message_id IS NOT NULL;

-- +goose Down
DROP INDEX webhook_deliveries_lead_message;
DROP INDEX webhook_deliveries_contact;
ALTER TABLE webhook_deliveries DROP COLUMN lead_message_id, DROP COLUMN contact_id;
DROP FUNCTION parley_lead_call_names(jsonb, text, text);
