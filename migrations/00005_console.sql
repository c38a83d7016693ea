-- +goose Up

-- People who sign in to the console. A member belongs to one organization
-- (an email is one member: sign-in by email needs no organization picker);
-- owner > admin > viewer. The password is an argon2id hash (PHC string),
-- absent for members who sign in with links only.
CREATE TABLE members (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  id uuid NOT NULL,
  email text NOT NULL CHECK (email = lower(email) AND length(email) BETWEEN 3 AND 320),
  role text NOT NULL CHECK (role IN ('owner', 'admin', 'viewer')),
  password_hash text,
  -- Platform operators see /console/admin (set by parley admin operator).
  operator boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  last_sign_in_at timestamptz,
  PRIMARY KEY (org_id, id)
);
-- Not led by org_id: a member is found by email before the organization is known.
CREATE UNIQUE INDEX members_email ON members (email);
ALTER TABLE members ENABLE ROW LEVEL SECURITY;
ALTER TABLE members FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON members
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
-- Password sign-in: a transaction that names an email (app.member_email) may
-- read that member's row, and only that one.
CREATE POLICY by_email ON members FOR SELECT
  USING (email = nullif(current_setting('app.member_email', true), ''));
CREATE TRIGGER members_resource_id AFTER INSERT OR DELETE ON members
  FOR EACH ROW EXECUTE FUNCTION parley_track_resource_id('member');

-- One-time links: sign-in links (for an existing member) and invitations
-- (which create the member). Only the SHA-256 of the link's token is kept.
CREATE TABLE member_links (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  token_hash bytea NOT NULL CHECK (length(token_hash) = 32),
  purpose text NOT NULL CHECK (purpose IN ('signin', 'invite')),
  email text NOT NULL CHECK (email = lower(email)),
  role text NOT NULL CHECK (role IN ('owner', 'admin', 'viewer')),
  created_by uuid,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  used_at timestamptz,
  PRIMARY KEY (org_id, token_hash)
);
CREATE UNIQUE INDEX member_links_token ON member_links (token_hash);
ALTER TABLE member_links ENABLE ROW LEVEL SECURITY;
ALTER TABLE member_links FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON member_links
  USING (org_id = parley_current_org()) WITH CHECK (org_id = parley_current_org());
-- Following a link: a transaction that knows its token (app.link_hash) may
-- read that link's row, and only that one.
CREATE POLICY by_token ON member_links FOR SELECT
  USING (token_hash = decode(nullif(current_setting('app.link_hash', true), ''), 'hex'));

-- Console sessions (github.com/alexedwards/scs). The token column holds the
-- SHA-256 of the cookie's token, never the token. Not tenant data: the
-- session's data names the member, whose organization every request then
-- scopes its transactions to.
CREATE TABLE sessions (
  token text PRIMARY KEY,
  data bytea NOT NULL,
  expiry timestamptz NOT NULL
);
CREATE INDEX sessions_expiry_idx ON sessions (expiry);

-- +goose Down
DROP TABLE sessions;
DROP TABLE member_links;
DROP TABLE members;
