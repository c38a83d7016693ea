-- +goose Up

-- Browser pages that may call a public agent without a key (issue 11): each
-- an origin (scheme://host[:port], one leading "*." for any subdomain) or
-- "*" for any. Empty: only the origins the deployment allows
-- (--cors-origin). Checked by the chat admitter, never for keyed calls.
ALTER TABLE agents ADD COLUMN allowed_origins text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE agents DROP COLUMN allowed_origins;
