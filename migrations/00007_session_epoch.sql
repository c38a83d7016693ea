-- +goose Up

-- A member's sessions carry the epoch they were signed in under; changing
-- the password moves it on, which ends every other session of the member
-- (a browser left signed in elsewhere, a copied cookie).
ALTER TABLE members ADD COLUMN session_epoch integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE members DROP COLUMN session_epoch;
