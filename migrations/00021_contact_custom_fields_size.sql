-- +goose Up

-- A contact's custom fields are merged from every chat request that names
-- it, a public agent's visitors' too: each request's are bounded
-- (contact.MaxCustomFields), and so is what a contact keeps, or new keys
-- request after request would grow one value without end, read again by
-- every listing of its conversations. NOT VALID: rows stored before are
-- not checked (an update of one is). backend/contact maps the refusal to
-- a 400 naming contact.customFields.
ALTER TABLE contacts ADD CONSTRAINT contacts_custom_fields_size
  CHECK (octet_length(custom_fields::text) <= 32768) NOT VALID;

-- +goose Down
ALTER TABLE contacts DROP CONSTRAINT contacts_custom_fields_size;
