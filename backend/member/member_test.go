package member_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/member"
)

// argonBytes is what one argon2id check allocates: its 19 MiB of memory.
const argonBytes = 19 << 20

// allocated is how many bytes the process allocated while fn ran.
// newService is a member service on a database of its own, with an
// organization on the pro plan.
func newService(t *testing.T) (*member.Service, uuid.UUID) {
	t.Helper()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	org, _, err := account.Bootstrap(context.Background(), store, "A", "pro")
	require.NoError(t, err)
	return &member.Service{Store: store}, org
}

func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Every refused password sign-in runs one argon2id check (its 19 MiB are
// the witness, steadier than a clock): a wrong password, an unknown email
// and a member without a password (who signs in by link) alike, so that
// timing tells none of them apart. A member without a password is refused
// even the dummy hash's own password.
//
// Not parallel: the allocation counts are the process's, and parallel tests
// start only after this one ends.
func TestSignInPasswordAlwaysChecksAHash(t *testing.T) {
	ctx := context.Background()
	s, org := newService(t)
	withPassword, err := s.CreateOwner(ctx, org, "ada@example.com")
	require.NoError(t, err)
	const password = "a long and rare passphrase"
	require.NoError(t, s.ChangePassword(ctx, withPassword, "", password))
	_, err = s.CreateOwner(ctx, org, "link@example.com")
	require.NoError(t, err)
	// An empty hash is no password either (Member.HasPassword).
	empty, err := s.CreateOwner(ctx, org, "empty@example.com")
	require.NoError(t, err)
	require.NoError(t, s.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		blank := ""
		_, err := q.SetMemberPassword(ctx, dbq.SetMemberPasswordParams{OrgID: org, ID: empty.ID, PasswordHash: &blank})
		return err
	}))

	m, err := s.SignInPassword(ctx, "ada@example.com", password)
	require.NoError(t, err)
	require.Equal(t, withPassword.ID, m.ID)

	for _, c := range []struct{ name, email, password string }{
		{"a wrong password", "ada@example.com", "not the passphrase"},
		{"an unknown email", "nobody@example.com", password},
		{"a member without a password", "link@example.com", password},
		{"a member without a password, the dummy's own", "link@example.com", "parley-no-such-member"},
		{"a member without a password, no password", "link@example.com", ""},
		{"a member with an empty hash", "empty@example.com", ""},
	} {
		var err error
		n := allocated(func() { _, err = s.SignInPassword(ctx, c.email, c.password) })
		require.Equal(t, apperr.Unauthenticated, apperr.CodeOf(err), "%s: %v", c.name, err)
		require.EqualError(t, err, "wrong email or password", c.name)
		require.GreaterOrEqual(t, n, uint64(argonBytes), "%s: no argon2id check ran (%d bytes allocated)", c.name, n)
	}
}

// A sign-in link made before its member was removed stays dead: it does
// not sign in whoever is invited later with the same email.
func TestRemovedMembersSignInLinksDie(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, org := newService(t)
	owner, err := s.CreateOwner(ctx, org, "owner@example.com")
	require.NoError(t, err)
	invite, err := s.InviteMember(ctx, owner, "viewer@example.com", member.Viewer)
	require.NoError(t, err)
	viewer, err := s.FollowLink(ctx, invite, "")
	require.NoError(t, err)

	old, err := s.SignInLink(ctx, org, "viewer@example.com")
	require.NoError(t, err)
	_, err = s.Remove(ctx, owner, viewer.ID)
	require.NoError(t, err)
	again, err := s.InviteMember(ctx, owner, "viewer@example.com", member.Admin)
	require.NoError(t, err)
	readmitted, err := s.FollowLink(ctx, again, "")
	require.NoError(t, err)
	require.Equal(t, member.Admin, readmitted.Role)

	_, err = s.FollowLink(ctx, old, "")
	require.Equal(t, apperr.Unauthenticated, apperr.CodeOf(err), "the removed member's link signed in: %v", err)
	fresh, err := s.SignInLink(ctx, org, "viewer@example.com")
	require.NoError(t, err)
	m, err := s.FollowLink(ctx, fresh, "")
	require.NoError(t, err, "a link made after works")
	require.Equal(t, readmitted.ID, m.ID)
}

// A removed member does not come back through an invitation of theirs
// nobody followed: an owner who sent two (the first mail lost, say) saw
// the member join with one; the other still worked after the member was
// removed, and made them a member again. An invitation sent after the
// removal works.
func TestRemovedMembersLeftoverInvitationsDie(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, org := newService(t)
	owner, err := s.CreateOwner(ctx, org, "owner@example.com")
	require.NoError(t, err)
	first, err := s.InviteMember(ctx, owner, "viewer@example.com", member.Viewer)
	require.NoError(t, err)
	second, err := s.InviteMember(ctx, owner, "viewer@example.com", member.Admin)
	require.NoError(t, err)
	viewer, err := s.FollowLink(ctx, first, "")
	require.NoError(t, err)

	_, err = s.Remove(ctx, owner, viewer.ID)
	require.NoError(t, err)
	back, err := s.FollowLink(ctx, second, "")
	require.Equal(t, apperr.Unauthenticated, apperr.CodeOf(err), "the removed member came back as %v: %v", back, err)

	again, err := s.InviteMember(ctx, owner, "viewer@example.com", member.Viewer)
	require.NoError(t, err)
	readmitted, err := s.FollowLink(ctx, again, "")
	require.NoError(t, err, "an invitation sent after the removal works")
	require.Equal(t, member.Viewer, readmitted.Role)
}

// A leftover invitation followed while its member is being removed: the
// removal goes through, and the invitation either finds the member still
// there (Conflict) or finds itself withdrawn (Unauthenticated), never a
// deadlock or a member made again.
func TestLeftoverInvitationFollowedDuringRemoval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, org := newService(t)
	owner, err := s.CreateOwner(ctx, org, "owner@example.com")
	require.NoError(t, err)
	for i := range 20 {
		email := fmt.Sprintf("viewer%d@example.com", i)
		first, err := s.InviteMember(ctx, owner, email, member.Viewer)
		require.NoError(t, err)
		second, err := s.InviteMember(ctx, owner, email, member.Viewer)
		require.NoError(t, err)
		viewer, err := s.FollowLink(ctx, first, "")
		require.NoError(t, err)

		var wg sync.WaitGroup
		var removeErr, followErr error
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, removeErr = s.Remove(ctx, owner, viewer.ID)
		}()
		go func() {
			defer wg.Done()
			<-start
			_, followErr = s.FollowLink(ctx, second, "")
		}()
		close(start)
		wg.Wait()
		require.NoError(t, removeErr)
		require.Contains(t, []apperr.Code{apperr.Conflict, apperr.Unauthenticated}, apperr.CodeOf(followErr), "%v", followErr)
		members, err := s.List(ctx, org)
		require.NoError(t, err)
		require.Len(t, members, 1, "only the owner is left")
	}
}

// A sign-in link made while its member is being removed dies with the
// member: Remove deletes the member's links after the member, and the
// member's deletion waits for the link's transaction (SignInLink locks the
// member's row). The held transaction below is SignInLink's, stopped
// between its read of the member and its commit.
func TestSignInLinkMadeDuringRemovalDies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, org := newService(t)
	owner, err := s.CreateOwner(ctx, org, "owner@example.com")
	require.NoError(t, err)
	invite, err := s.InviteMember(ctx, owner, "viewer@example.com", member.Viewer)
	require.NoError(t, err)
	viewer, err := s.FollowLink(ctx, invite, "")
	require.NoError(t, err)

	tx, err := s.Store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	q := dbq.New(tx)
	require.NoError(t, q.SetTenant(ctx, org.String()))
	_, err = q.MemberOfOrgByEmail(ctx, dbq.MemberOfOrgByEmailParams{OrgID: org, Email: "viewer@example.com"})
	require.NoError(t, err)

	removed := make(chan error, 1)
	go func() {
		_, err := s.Remove(ctx, owner, viewer.ID)
		removed <- err
	}()
	dbtest.WaitForLockWait(t, s.Store.Pool, "")
	const token = "made-while-the-member-was-being-removed"
	h := sha256.Sum256([]byte(token))
	require.NoError(t, q.CreateMemberLink(ctx, dbq.CreateMemberLinkParams{OrgID: org, TokenHash: h[:], Purpose: "signin",
		Email: "viewer@example.com", Role: string(member.Viewer), ExpiresAt: time.Now().Add(time.Hour)}))
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-removed)

	again, err := s.InviteMember(ctx, owner, "viewer@example.com", member.Admin)
	require.NoError(t, err)
	_, err = s.FollowLink(ctx, again, "")
	require.NoError(t, err)
	_, err = s.FollowLink(ctx, token, "")
	require.Equal(t, apperr.Unauthenticated, apperr.CodeOf(err), "the link made during the removal signed in: %v", err)
}

// A member who lost their password gets back in by a sign-in link (parley
// admin signin-link), which may set a new one: the old one stops working
// and their other sessions end (the epoch moves). A new password too short
// leaves the link unspent.
func TestSignInLinkSetsANewPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, org := newService(t)
	m, err := s.CreateOwner(ctx, org, "ada@example.com")
	require.NoError(t, err)
	require.NoError(t, s.ChangePassword(ctx, m, "", "the one she forgot"))
	before, err := s.Get(ctx, org, m.ID)
	require.NoError(t, err)

	link, err := s.SignInLink(ctx, org, "ada@example.com")
	require.NoError(t, err)
	_, err = s.FollowLink(ctx, link, "short")
	require.Equal(t, apperr.Invalid, apperr.CodeOf(err), "%v", err)
	back, err := s.FollowLink(ctx, link, "a new and longer passphrase")
	require.NoError(t, err, "the refused password left the link unspent")
	require.Equal(t, m.ID, back.ID)
	require.Equal(t, before.SessionEpoch+1, back.SessionEpoch, "the member's other sessions end")

	_, err = s.SignInPassword(ctx, "ada@example.com", "the one she forgot")
	require.Equal(t, apperr.Unauthenticated, apperr.CodeOf(err))
	_, err = s.SignInPassword(ctx, "ada@example.com", "a new and longer passphrase")
	require.NoError(t, err)

	// Without a password, a link signs in and changes nothing.
	link, err = s.SignInLink(ctx, org, "ada@example.com")
	require.NoError(t, err)
	_, err = s.FollowLink(ctx, link, "")
	require.NoError(t, err)
	_, err = s.SignInPassword(ctx, "ada@example.com", "a new and longer passphrase")
	require.NoError(t, err)
}

// Sign-in links and invitations, with the email each holds, are deleted
// member.LinkRetention after they were used or expired, in every
// organization, by the console's sweep; fresh, pending and recently done
// ones stay. A tenant transaction naming the sweep's cutoff deletes no
// other organization's through the sweep's policies.
func TestPruneLinksDeletesOldLinksOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, orgA := newService(t)
	orgB, _, err := account.Bootstrap(ctx, s.Store, "B", "pro")
	require.NoError(t, err)
	day := 24 * time.Hour
	now := time.Now()
	cutoff := now.Add(-member.LinkRetention)

	// put writes a link of org, expiring at expires, used at used if not
	// zero, and returns its hash.
	put := func(org uuid.UUID, name string, expires, used time.Time) string {
		t.Helper()
		h := sha256.Sum256([]byte(org.String() + name))
		var usedAt *time.Time
		if !used.IsZero() {
			usedAt = &used
		}
		require.NoError(t, s.Store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
			_, err := tx.Exec(ctx, `INSERT INTO member_links (org_id, token_hash, purpose, email, role, expires_at, used_at)
				VALUES ($1, $2, 'invite', $3, 'viewer', $4, $5)`, org, h[:], name+"@example.com", expires, usedAt)
			return err
		}))
		return fmt.Sprintf("%x", h[:])
	}
	kept := map[uuid.UUID]map[string]bool{}
	for _, org := range []uuid.UUID{orgA, orgB} {
		put(org, "expired-long-ago", now.Add(-8*day), time.Time{})
		put(org, "used-long-ago", now.Add(-day), now.Add(-8*day)) // expired since, but within the grace period
		kept[org] = map[string]bool{
			put(org, "expired-lately", now.Add(-6*day), time.Time{}): true,
			put(org, "used-lately", now.Add(5*day), now.Add(-day)):   true,
			put(org, "pending", now.Add(time.Hour), time.Time{}):     true,
		}
	}
	left := func(org uuid.UUID) map[string]bool {
		t.Helper()
		hashes := map[string]bool{}
		require.NoError(t, s.Store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
			rows, err := tx.Query(ctx, "SELECT encode(token_hash, 'hex') FROM member_links")
			if err != nil {
				return err
			}
			hs, err := pgx.CollectRows(rows, pgx.RowTo[string])
			for _, h := range hs {
				hashes[h] = true
			}
			return err
		}))
		return hashes
	}

	// B's transaction naming the cutoff sees and deletes none of A's.
	tx, err := s.Store.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true), set_config('app.link_expired_before', $2, true)",
		orgB.String(), cutoff.UTC().Format(time.RFC3339Nano))
	require.NoError(t, err)
	var seen int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM member_links WHERE org_id = $1", orgA).Scan(&seen))
	require.Zero(t, seen)
	tag, err := tx.Exec(ctx, "DELETE FROM member_links WHERE org_id = $1", orgA)
	require.NoError(t, err)
	require.Zero(t, tag.RowsAffected())
	require.NoError(t, tx.Commit(ctx))
	require.Len(t, left(orgA), 5)

	n, err := member.PruneLinks(ctx, s.Store, cutoff)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	require.Equal(t, kept[orgA], left(orgA))
	require.Equal(t, kept[orgB], left(orgB))
	n, err = member.PruneLinks(ctx, s.Store, cutoff)
	require.NoError(t, err)
	require.Zero(t, n)
}
