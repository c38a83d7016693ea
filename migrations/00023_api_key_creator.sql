-- +goose Up

-- Who made a key: a console member's email, the key that issued it, or
-- the command line. Keys belong to the organization and outlive their
-- maker; the console shows who made each, and warns an owner removing a
-- member of the keys that member made, so that they can be revoked.
-- Keys made before this migration say nothing ('').
ALTER TABLE api_keys ADD COLUMN created_by text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE api_keys DROP COLUMN created_by;
