-- +goose Up

-- One-time links (sign-in links and invitations) hold the email they were
-- sent to, and were kept for good once used or expired. A periodic sweep
-- (member.PruneLinks, run beside the console's expired sessions) deletes
-- them across organizations a grace period after they were used or
-- expired: its transaction names a cutoff in app.link_expired_before, and
-- these policies let it see and delete exactly the links used or expired
-- before that cutoff, and only in a transaction that acts for no
-- organization (a tenant transaction that also named a cutoff would see
-- other organizations' otherwise). LEAST skips NULL: a link not used is
-- done when it expires.
CREATE FUNCTION parley_link_expired(expires_at timestamptz, used_at timestamptz) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT nullif(current_setting('app.org_id', true), '') IS NULL
          AND least(used_at, expires_at) < nullif(current_setting('app.link_expired_before', true), '')::timestamptz $$;
CREATE POLICY expired_read ON member_links FOR SELECT
  USING (parley_link_expired(expires_at, used_at));
CREATE POLICY expired_delete ON member_links FOR DELETE
  USING (parley_link_expired(expires_at, used_at));
-- The sweep reads the links done longest ago first, across organizations.
CREATE INDEX member_links_done ON member_links (least(used_at, expires_at));

-- +goose Down
DROP INDEX member_links_done;
DROP POLICY expired_delete ON member_links;
DROP POLICY expired_read ON member_links;
DROP FUNCTION parley_link_expired(timestamptz, timestamptz);
