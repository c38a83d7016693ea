-- name: SetMemberEmail :exec
-- Lets the current transaction read the member with this email (by_email).
SELECT set_config('app.member_email', sqlc.arg(email)::text, true);

-- name: SetLinkHash :exec
-- Lets the current transaction read the link with this token hash (by_token).
SELECT set_config('app.link_hash', sqlc.arg(hash_hex)::text, true);

-- name: MemberByEmail :one
SELECT * FROM members WHERE email = sqlc.arg(email);

-- name: GetMember :one
SELECT * FROM members WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: MemberOfOrgByEmail :one
-- The organization's member with this email, locked until the transaction
-- ends: SignInLink makes their link while Remove, which deletes the
-- member's links after the member, waits.
SELECT * FROM members WHERE org_id = sqlc.arg(org_id) AND email = sqlc.arg(email) FOR SHARE;

-- name: ListMembers :many
SELECT * FROM members WHERE org_id = sqlc.arg(org_id) ORDER BY created_at, id;

-- name: CreateMember :one
INSERT INTO members (org_id, id, email, role, password_hash)
VALUES (sqlc.arg(org_id), sqlc.arg(id), sqlc.arg(email), sqlc.arg(role), sqlc.narg(password_hash))
RETURNING *;

-- name: SetMemberRole :execrows
UPDATE members SET role = sqlc.arg(role) WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: SetMemberPassword :execrows
-- A new password ends the member's other sessions (session_epoch).
UPDATE members SET password_hash = sqlc.arg(password_hash), session_epoch = session_epoch + 1
WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: TouchMemberSignIn :exec
UPDATE members SET last_sign_in_at = now() WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: DeleteMember :execrows
DELETE FROM members WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: CountOwners :one
-- Locks the owners' rows: two concurrent demotions cannot both leave none.
SELECT count(*) FROM (SELECT 1 FROM members WHERE org_id = sqlc.arg(org_id) AND role = 'owner' FOR UPDATE) o;

-- name: SetOperator :execrows
UPDATE members SET operator = sqlc.arg(operator) WHERE org_id = sqlc.arg(org_id) AND id = sqlc.arg(id);

-- name: CreateMemberLink :exec
INSERT INTO member_links (org_id, token_hash, purpose, email, role, created_by, expires_at)
VALUES (sqlc.arg(org_id), sqlc.arg(token_hash), sqlc.arg(purpose), sqlc.arg(email), sqlc.arg(role), sqlc.narg(created_by), sqlc.arg(expires_at));

-- name: LinkByToken :one
-- Run after SetLinkHash. (UseMemberLink makes it used once.)
SELECT * FROM member_links WHERE token_hash = sqlc.arg(token_hash);

-- name: UseMemberLink :execrows
UPDATE member_links SET used_at = now()
WHERE org_id = sqlc.arg(org_id) AND token_hash = sqlc.arg(token_hash) AND used_at IS NULL;

-- name: ListPendingInvites :many
SELECT email, role, created_at, expires_at FROM member_links
WHERE org_id = sqlc.arg(org_id) AND purpose = 'invite' AND used_at IS NULL AND expires_at > now()
ORDER BY created_at DESC;

-- name: WithdrawInvites :execrows
-- An owner withdraws the invitations of an email not yet followed.
DELETE FROM member_links
WHERE org_id = sqlc.arg(org_id) AND purpose = 'invite' AND used_at IS NULL AND email = sqlc.arg(email);

-- name: DeleteSigninLinksFor :exec
-- The sign-in links for an email not yet followed, deleted when its member
-- is removed: one made before would otherwise sign in whoever is invited
-- with that email later.
DELETE FROM member_links
WHERE org_id = sqlc.arg(org_id) AND purpose = 'signin' AND used_at IS NULL AND email = sqlc.arg(email);

-- name: WithdrawInvitesBy :exec
-- The invitations a member made and nobody followed, withdrawn when the
-- member is removed or is no longer an owner.
DELETE FROM member_links
WHERE org_id = sqlc.arg(org_id) AND purpose = 'invite' AND used_at IS NULL AND created_by = sqlc.arg(created_by)::uuid;

-- name: PruneMemberLinks :execrows
-- Deletes up to max_rows of the links used or expired longest ago that the
-- transaction may see as such (db.Store.ExpiredLinks: the cutoff is in its
-- scope and in the expired_* policies, which the condition here repeats
-- beside RLS).
DELETE FROM member_links
WHERE (org_id, token_hash) IN (
  SELECT org_id, token_hash FROM member_links
  WHERE least(used_at, expires_at) < sqlc.arg(before)::timestamptz
  ORDER BY least(used_at, expires_at)
  LIMIT sqlc.arg(max_rows)
);
