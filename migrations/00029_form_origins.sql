-- +goose Up

-- Browser pages that may GET and submit a published form without a key:
-- each an origin (scheme://host[:port], one leading "*." for any
-- subdomain) or "*" for any. Empty: only the origins the deployment allows
-- (--cors-origin). Checked by the form service for keyless calls only.
ALTER TABLE forms ADD COLUMN allowed_origins text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE forms DROP COLUMN allowed_origins;
