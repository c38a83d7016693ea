-- +goose Up

-- Who made a key: a console member's email, the key that issued it, or
-- the command line (created_by, shown as is); and the member a key
-- descends from (member: the member who made it, or the member of the key
-- that issued it; '' for keys of the command line and theirs). Keys
-- belong to the organization and outlive their maker; the console shows
-- who made each, and warns an owner removing a member of every key still
-- working that descends from that member, so that they can be revoked.
-- Keys made before this migration say nothing ('').
ALTER TABLE api_keys ADD COLUMN created_by text NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN member text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE api_keys DROP COLUMN member;
ALTER TABLE api_keys DROP COLUMN created_by;
