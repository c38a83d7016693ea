-- +goose Up

-- A contact found by its phone number (contact.find, ContactByPhone: on a
-- chat turn that names a contact by phone, a public agent's visitor's too)
-- may have an email: contacts_org_phone holds only those without one, so
-- the lookup read every contact of the organization. This index holds every
-- contact with a phone number.
CREATE INDEX contacts_org_phone_number ON contacts (org_id, phone_number) WHERE phone_number IS NOT NULL;

-- +goose Down
DROP INDEX contacts_org_phone_number;
