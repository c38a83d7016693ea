-- +goose Up

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
ALTER TABLE webhook_deliveries
  ADD COLUMN contact_id text GENERATED ALWAYS AS (
    CASE WHEN event_type = 'lead.created' THEN parley_delivery_field(body, 'id')
         WHEN event_type IN ('conversation.created', 'conversation.human_requested', 'conversation.resolved')
           THEN nullif(parley_delivery_field(body, 'contactId'), '') END) STORED;

CREATE INDEX webhook_deliveries_contact ON webhook_deliveries (org_id, contact_id)
  WHERE contact_id IS NOT NULL;

-- +goose Down
DROP INDEX webhook_deliveries_contact;
ALTER TABLE webhook_deliveries DROP COLUMN contact_id;
