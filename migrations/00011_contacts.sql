-- +goose Up

-- What agents noted about a contact (the lead_capture tool's notes), oldest
-- first, one per line.
ALTER TABLE contacts ADD COLUMN notes text NOT NULL DEFAULT '';

-- The contacts listing (newest first, by cursor) and a contact's
-- conversations.
CREATE INDEX contacts_org_created ON contacts (org_id, created_at DESC, id DESC);
CREATE INDEX conversations_org_contact ON conversations (org_id, contact_id, created_at DESC)
  WHERE contact_id IS NOT NULL;

-- Contact ids join the id registry, so that the API tells another
-- organization's contact (403) from one that does not exist (404), as it
-- does for agents and keys (db.Missing). The app role owns contacts but FORCE
-- makes it see no row without a tenant; lifting FORCE for the backfill is
-- invisible to others (ALTER TABLE holds an exclusive lock until the
-- migration's transaction commits, with FORCE back on).
CREATE TRIGGER contacts_resource_id AFTER INSERT OR DELETE ON contacts
  FOR EACH ROW EXECUTE FUNCTION parley_track_resource_id('contact');
ALTER TABLE contacts NO FORCE ROW LEVEL SECURITY;
INSERT INTO resource_ids (id, kind) SELECT id, 'contact' FROM contacts ON CONFLICT (id) DO NOTHING;
ALTER TABLE contacts FORCE ROW LEVEL SECURITY;

-- +goose Down
ALTER TABLE contacts NO FORCE ROW LEVEL SECURITY;
DELETE FROM resource_ids r USING contacts c WHERE r.id = c.id AND r.kind = 'contact';
ALTER TABLE contacts FORCE ROW LEVEL SECURITY;
DROP TRIGGER contacts_resource_id ON contacts;
DROP INDEX conversations_org_contact;
DROP INDEX contacts_org_created;
ALTER TABLE contacts DROP COLUMN notes;
