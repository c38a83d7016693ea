package member_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/member"
)

// The console reads the signed-in member once, at the start of a request
// (console.signedIn), then calls the service. An owner demoted or removed
// by another owner while their request is in flight must not act as an
// owner on that stale read: the service checks the caller's role as the
// database holds it, in the transaction that makes the change. Otherwise
// a demoted owner puts themselves back (SetRole on their own row is no
// owner's demotion, so no other check runs), and a removed owner promotes
// a confederate to owner on their way out.
func TestStaleOwnerCannotManageMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, org := newService(t)
	boss, err := s.CreateOwner(ctx, org, "boss@example.com")
	require.NoError(t, err)
	rogue, err := s.CreateOwner(ctx, org, "rogue@example.com") // rogue's request read this
	require.NoError(t, err)
	link, err := s.InviteMember(ctx, boss, "friend@example.com", member.Viewer)
	require.NoError(t, err)
	friend, err := s.FollowLink(ctx, link, "")
	require.NoError(t, err)

	// The boss demotes the rogue; the rogue's in-flight requests still
	// carry their owner's role.
	require.NoError(t, s.SetRole(ctx, boss, rogue.ID, member.Viewer))
	err = s.SetRole(ctx, rogue, rogue.ID, member.Owner)
	require.Equal(t, apperr.Forbidden, apperr.CodeOf(err), "a demoted owner promoted themselves back: %v", err)
	err = s.SetRole(ctx, rogue, friend.ID, member.Owner)
	require.Equal(t, apperr.Forbidden, apperr.CodeOf(err), "a demoted owner promoted a friend: %v", err)
	_, err = s.Remove(ctx, rogue, boss.ID)
	require.Equal(t, apperr.Forbidden, apperr.CodeOf(err), "a demoted owner removed an owner: %v", err)
	_, err = s.InviteMember(ctx, rogue, "another@example.com", member.Admin)
	require.Equal(t, apperr.Forbidden, apperr.CodeOf(err), "a demoted owner invited: %v", err)
	got, err := s.Get(ctx, org, rogue.ID)
	require.NoError(t, err)
	require.Equal(t, member.Viewer, got.Role)
	got, err = s.Get(ctx, org, friend.ID)
	require.NoError(t, err)
	require.Equal(t, member.Viewer, got.Role)

	// Removed altogether, the same.
	require.NoError(t, s.SetRole(ctx, boss, rogue.ID, member.Owner))
	rogue, err = s.Get(ctx, org, rogue.ID)
	require.NoError(t, err)
	_, err = s.Remove(ctx, boss, rogue.ID)
	require.NoError(t, err)
	err = s.SetRole(ctx, rogue, friend.ID, member.Owner)
	require.Equal(t, apperr.Forbidden, apperr.CodeOf(err), "a removed owner promoted a friend: %v", err)
	err = s.WithdrawInvites(ctx, rogue, "nobody@example.com")
	require.Equal(t, apperr.Forbidden, apperr.CodeOf(err), "a removed owner withdrew invitations: %v", err)

	// A current owner still manages members.
	require.NoError(t, s.SetRole(ctx, boss, friend.ID, member.Admin))
}

// Two owners demoting each other at once: one wins, the other is refused
// (no longer an owner, or the last one), never a deadlock, and one owner
// is left.
func TestOwnersDemotingEachOtherAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, org := newService(t)
	for i := range 10 {
		a, err := s.CreateOwner(ctx, org, fmt.Sprintf("a%d@example.com", i))
		require.NoError(t, err)
		b, err := s.CreateOwner(ctx, org, fmt.Sprintf("b%d@example.com", i))
		require.NoError(t, err)
		errs := make(chan error, 2)
		go func() { errs <- s.SetRole(ctx, a, b.ID, member.Admin) }()
		go func() { errs <- s.SetRole(ctx, b, a.ID, member.Admin) }()
		e1, e2 := <-errs, <-errs
		ok := 0
		for _, err := range []error{e1, e2} {
			if err == nil {
				ok++
				continue
			}
			switch apperr.CodeOf(err) {
			case apperr.Forbidden, apperr.FailedPrecondition:
			default:
				t.Fatalf("round %d: %v", i, err)
			}
		}
		require.Equal(t, 1, ok, "round %d: %v, %v", i, e1, e2)
		// The winner stays an owner; the loser is an admin.
		ga, err := s.Get(ctx, org, a.ID)
		require.NoError(t, err)
		gb, err := s.Get(ctx, org, b.ID)
		require.NoError(t, err)
		require.ElementsMatch(t, []member.Role{member.Owner, member.Admin}, []member.Role{ga.Role, gb.Role})
	}
}
