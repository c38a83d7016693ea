// Package member is the people of an organization who use the console: their
// roles, passwords (argon2id), one-time sign-in links and invitations. The
// console and `parley admin` call it; it decides who is a member and what a
// role may do, and nothing else does.
//
// It must never store or log a password or a link's token: only an argon2id
// hash of the one and the SHA-256 of the other leave it.
package member

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/mail"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
)

// Role is what a member may do.
type Role string

// The roles, from most to least powerful.
const (
	// Owner may do everything, members and the organization included.
	Owner Role = "owner"
	// Admin may do everything but manage members.
	Admin Role = "admin"
	// Viewer reads, and never sees or creates keys.
	Viewer Role = "viewer"
)

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case Owner, Admin, Viewer:
		return r, nil
	}
	return "", apperr.InvalidField("role", "must be owner, admin or viewer")
}

// LinkTTL is how long a sign-in link or an invitation may be followed.
const LinkTTL = 15 * time.Minute

// InviteTTL is how long an invitation may be followed: it is copied to a
// person, who may not read it at once.
const InviteTTL = 7 * 24 * time.Hour

// Member is a person of an organization, as the console sees them.
type Member struct {
	ID           uuid.UUID
	OrgID        uuid.UUID
	Email        string
	Role         Role
	Operator     bool
	HasPassword  bool
	CreatedAt    time.Time
	LastSignInAt *time.Time
	// SessionEpoch moves on when the password changes: sessions signed in
	// under an older one are over.
	SessionEpoch int32
}

// Can reports whether m's role allows what need requires: every role reads;
// admin and owner change things; only owners manage members.
func (m *Member) Can(need Role) bool {
	rank := map[Role]int{Viewer: 0, Admin: 1, Owner: 2}
	return rank[m.Role] >= rank[need]
}

// Principal is the member as the services see a caller: an organization and
// scopes. A viewer carries none: services that need a scope refuse it.
func (m *Member) Principal(orgPlan string) *auth.Principal {
	p := &auth.Principal{OrgID: m.OrgID, Plan: orgPlan, Member: m.Email}
	if m.Can(Admin) {
		p.Scopes = []string{string(auth.ScopeAdmin), string(auth.ScopeChat)}
	}
	return p
}

func fromRow(r dbq.Member) *Member {
	return &Member{ID: r.ID, OrgID: r.OrgID, Email: r.Email, Role: Role(r.Role), Operator: r.Operator,
		HasPassword: r.PasswordHash != nil && *r.PasswordHash != "", CreatedAt: r.CreatedAt, LastSignInAt: r.LastSignInAt,
		SessionEpoch: r.SessionEpoch}
}

// Service manages members.
type Service struct {
	Store *db.Store
	Now   func() time.Time
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// NormalizeEmail checks an address and returns it in lower case.
func NormalizeEmail(email string) (string, error) {
	email = strings.ToLower(strings.TrimSpace(email))
	a, err := mail.ParseAddress(email)
	if err != nil || a.Address != email || len(email) > 320 {
		return "", apperr.InvalidField("email", "not an email address")
	}
	return email, nil
}

// errBadSignIn is every failed password sign-in: it says nothing of which
// part was wrong.
var errBadSignIn = apperr.New(apperr.Unauthenticated, "wrong email or password")

// SignInPassword returns the member with this email and password.
func (s *Service) SignInPassword(ctx context.Context, email, password string) (*Member, error) {
	email, err := NormalizeEmail(email)
	if err != nil {
		return nil, errBadSignIn
	}
	var row dbq.Member
	err = s.Store.MemberEmail(ctx, email, func(q *dbq.Queries) (err error) {
		row, err = q.MemberByEmail(ctx, email)
		return err
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	// Every attempt checks one hash: the member's, or dummyHash when no
	// member has the email or the member has no password (signs in by
	// link). The clock tells none of these apart from a wrong password.
	hash, has := dummyHash, err == nil && fromRow(row).HasPassword
	if has {
		hash = *row.PasswordHash
	}
	ok, err := CheckPassword(ctx, hash, password)
	if err != nil {
		return nil, err
	}
	if !ok || !has {
		return nil, errBadSignIn
	}
	m := fromRow(row)
	return m, s.touch(ctx, m)
}

func (s *Service) touch(ctx context.Context, m *Member) error {
	return s.Store.Tenant(ctx, m.OrgID, func(q *dbq.Queries) error {
		return q.TouchMemberSignIn(ctx, dbq.TouchMemberSignInParams{OrgID: m.OrgID, ID: m.ID})
	})
}

// Get returns a member of org, or NotFound.
func (s *Service) Get(ctx context.Context, org, id uuid.UUID) (*Member, error) {
	var m *Member
	err := s.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		r, err := q.GetMember(ctx, dbq.GetMemberParams{OrgID: org, ID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.New(apperr.NotFound, "member not found")
		}
		m = fromRow(r)
		return err
	})
	return m, err
}

// List returns the members of org.
func (s *Service) List(ctx context.Context, org uuid.UUID) ([]*Member, error) {
	var out []*Member
	err := s.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		rows, err := q.ListMembers(ctx, org)
		for _, r := range rows {
			out = append(out, fromRow(r))
		}
		return err
	})
	return out, err
}

// Invite is a pending invitation.
type Invite struct {
	Email     string
	Role      Role
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Invites lists org's invitations not yet followed.
func (s *Service) Invites(ctx context.Context, org uuid.UUID) ([]Invite, error) {
	var out []Invite
	err := s.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		rows, err := q.ListPendingInvites(ctx, org)
		for _, r := range rows {
			out = append(out, Invite{Email: r.Email, Role: Role(r.Role), CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt})
		}
		return err
	})
	return out, err
}

// EmailFree checks that no member has email yet (one organization per
// email), before anything is created for it.
func (s *Service) EmailFree(ctx context.Context, email string) error {
	email, err := NormalizeEmail(email)
	if err != nil {
		return err
	}
	return s.Store.MemberEmail(ctx, email, func(q *dbq.Queries) error {
		_, err := q.MemberByEmail(ctx, email)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err == nil {
			return apperr.New(apperr.Conflict, "%s is already a member of an organization", email)
		}
		return err
	})
}

// CreateOwner makes email the owner of org (parley admin bootstrap).
func (s *Service) CreateOwner(ctx context.Context, org uuid.UUID, email string) (*Member, error) {
	email, err := NormalizeEmail(email)
	if err != nil {
		return nil, err
	}
	var m *Member
	err = s.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		r, err := q.CreateMember(ctx, dbq.CreateMemberParams{OrgID: org, ID: uuid.Must(uuid.NewV7()), Email: email, Role: string(Owner)})
		if err != nil {
			return duplicate(err)
		}
		m = fromRow(r)
		return nil
	})
	return m, err
}

func duplicate(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.ConstraintName == "members_email" {
		return apperr.New(apperr.Conflict, "this email is already a member of an organization")
	}
	return err
}

// SignInLink makes a one-time link token that signs in org's member with
// this email, valid LinkTTL (parley admin bootstrap and signin-link).
func (s *Service) SignInLink(ctx context.Context, org uuid.UUID, email string) (string, error) {
	email, err := NormalizeEmail(email)
	if err != nil {
		return "", err
	}
	var token string
	err = s.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		r, err := q.MemberOfOrgByEmail(ctx, dbq.MemberOfOrgByEmailParams{OrgID: org, Email: email})
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.New(apperr.NotFound, "%s is not a member of this organization", email)
		}
		if err != nil {
			return err
		}
		token, err = s.link(ctx, q, org, "signin", email, Role(r.Role), nil, LinkTTL)
		return err
	})
	return token, err
}

// InviteMember makes an invitation for email with role, from by (an owner).
// Its token is shown to the inviter, who passes it on.
func (s *Service) InviteMember(ctx context.Context, by *Member, email string, role Role) (string, error) {
	// SECURITY: only owners manage members.
	if !by.Can(Owner) {
		return "", apperr.New(apperr.Forbidden, "only owners invite members")
	}
	email, err := NormalizeEmail(email)
	if err != nil {
		return "", err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return "", err
	}
	var token string
	err = s.Store.Tenant(ctx, by.OrgID, func(q *dbq.Queries) error {
		if err := ownerNow(ctx, q, by, "only owners invite members"); err != nil {
			return err
		}
		// Someone already in this organization needs no invitation. (Whether
		// the email belongs to another organization is not said here: the
		// invitation fails when followed, and no owner learns who else uses
		// Parley.)
		rows, err := q.ListMembers(ctx, by.OrgID)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if r.Email == email {
				return apperr.New(apperr.Conflict, "%s is already a member of this organization", email)
			}
		}
		// The invitation names its maker, whose role FollowLink checks; one
		// made for the organization itself (a Member with no id: tooling
		// and tests acting as its owner) names none.
		var maker *uuid.UUID
		if by.ID != uuid.Nil {
			maker = &by.ID
		}
		token, err = s.link(ctx, q, by.OrgID, "invite", email, role, maker, InviteTTL)
		return err
	})
	return token, err
}

// WithdrawInvites withdraws the invitations of email that nobody followed
// yet: their links stop working at once. Only owners may.
func (s *Service) WithdrawInvites(ctx context.Context, by *Member, email string) error {
	// SECURITY: only owners manage members.
	if !by.Can(Owner) {
		return apperr.New(apperr.Forbidden, "only owners withdraw invitations")
	}
	email, err := NormalizeEmail(email)
	if err != nil {
		return err
	}
	return s.Store.Tenant(ctx, by.OrgID, func(q *dbq.Queries) error {
		if err := ownerNow(ctx, q, by, "only owners withdraw invitations"); err != nil {
			return err
		}
		n, err := q.WithdrawInvites(ctx, dbq.WithdrawInvitesParams{OrgID: by.OrgID, Email: email})
		if err == nil && n == 0 {
			return apperr.New(apperr.NotFound, "no invitation of %s is waiting", email)
		}
		return err
	})
}

func (s *Service) link(ctx context.Context, q *dbq.Queries, org uuid.UUID, purpose, email string, role Role, by *uuid.UUID, ttl time.Duration) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	h := sha256.Sum256([]byte(token))
	return token, q.CreateMemberLink(ctx, dbq.CreateMemberLinkParams{OrgID: org, TokenHash: h[:], Purpose: purpose,
		Email: email, Role: string(role), CreatedBy: by, ExpiresAt: s.now().Add(ttl)})
}

// newPasswordHash is the hash of a new password, checked first
// (CheckNewPassword): an invitation's, a sign-in link's, a change's.
func newPasswordHash(ctx context.Context, password string) (string, error) {
	if err := CheckNewPassword(password); err != nil {
		return "", err
	}
	return HashPassword(ctx, password)
}

// errBadLink is every link that cannot be followed.
var errBadLink = apperr.New(apperr.Unauthenticated, "this link is invalid, used or expired; ask for a new one")

// FollowLink uses a sign-in link or an invitation once and returns the
// member it signs in: created by an invitation, with password if given;
// found by a sign-in link, whose password, if given, replaces theirs.
func (s *Service) FollowLink(ctx context.Context, token, password string) (*Member, error) {
	if token == "" || len(token) > 100 {
		return nil, errBadLink
	}
	h := sha256.Sum256([]byte(token))
	var m *Member
	err := s.Store.Link(ctx, h[:], func(q *dbq.Queries) error {
		l, err := q.LinkByToken(ctx, h[:])
		if errors.Is(err, pgx.ErrNoRows) {
			return errBadLink
		}
		if err != nil {
			return err
		}
		if l.UsedAt != nil || !s.now().Before(l.ExpiresAt) {
			return errBadLink
		}
		// From here on the transaction acts for the link's organization.
		if err := q.SetTenant(ctx, l.OrgID.String()); err != nil {
			return err
		}
		if n, err := q.UseMemberLink(ctx, dbq.UseMemberLinkParams{OrgID: l.OrgID, TokenHash: h[:]}); err != nil || n != 1 {
			if err == nil {
				err = errBadLink // followed twice at once
			}
			return err
		}
		if l.Purpose == "invite" {
			// SECURITY: an invitation speaks for the owner who made it, so
			// it stops working when they are no longer one (Remove and
			// SetRole withdraw theirs; this holds even for one made while
			// they were being removed): an owner about to be removed cannot
			// leave themselves a way back in.
			if l.CreatedBy != nil {
				by, err := q.GetMember(ctx, dbq.GetMemberParams{OrgID: l.OrgID, ID: *l.CreatedBy})
				if errors.Is(err, pgx.ErrNoRows) || err == nil && by.Role != string(Owner) {
					return errBadLink
				}
				if err != nil {
					return err
				}
			}
			var hash *string
			if password != "" {
				ph, err := newPasswordHash(ctx, password)
				if err != nil {
					return err
				}
				hash = &ph
			}
			r, err := q.CreateMember(ctx, dbq.CreateMemberParams{OrgID: l.OrgID, ID: uuid.Must(uuid.NewV7()), Email: l.Email, Role: l.Role, PasswordHash: hash})
			if err != nil {
				return duplicate(err)
			}
			m = fromRow(r)
		} else {
			r, err := q.MemberOfOrgByEmail(ctx, dbq.MemberOfOrgByEmailParams{OrgID: l.OrgID, Email: l.Email})
			if errors.Is(err, pgx.ErrNoRows) {
				return errBadLink // the member was removed since
			}
			if err != nil {
				return err
			}
			if password != "" {
				// A sign-in link is how a member who lost their password
				// gets back in (parley admin signin-link): it may set a new
				// one, which ends their other sessions.
				ph, err := newPasswordHash(ctx, password)
				if err != nil {
					return err
				}
				if _, err := q.SetMemberPassword(ctx, dbq.SetMemberPasswordParams{OrgID: l.OrgID, ID: r.ID, PasswordHash: &ph}); err != nil {
					return err
				}
				r.PasswordHash, r.SessionEpoch = &ph, r.SessionEpoch+1
			}
			m = fromRow(r)
		}
		return q.TouchMemberSignIn(ctx, dbq.TouchMemberSignInParams{OrgID: l.OrgID, ID: m.ID})
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// SetRole changes a member's role. Only owners may, and an organization
// keeps at least one owner.
func (s *Service) SetRole(ctx context.Context, by *Member, id uuid.UUID, role Role) error {
	// SECURITY: only owners manage members.
	if !by.Can(Owner) {
		return apperr.New(apperr.Forbidden, "only owners change roles")
	}
	if _, err := ParseRole(string(role)); err != nil {
		return err
	}
	return s.Store.Tenant(ctx, by.OrgID, func(q *dbq.Queries) error {
		if err := ownerNow(ctx, q, by, "only owners change roles"); err != nil {
			return err
		}
		target, err := q.GetMember(ctx, dbq.GetMemberParams{OrgID: by.OrgID, ID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.New(apperr.NotFound, "member not found")
		}
		if err != nil {
			return err
		}
		if target.Role == string(Owner) && role != Owner {
			if err := lastOwner(ctx, q, by.OrgID); err != nil {
				return err
			}
			// Their invitations spoke for an owner (FollowLink).
			if err := q.WithdrawInvitesBy(ctx, dbq.WithdrawInvitesByParams{OrgID: by.OrgID, CreatedBy: id}); err != nil {
				return err
			}
		}
		_, err = q.SetMemberRole(ctx, dbq.SetMemberRoleParams{OrgID: by.OrgID, ID: id, Role: string(role)})
		return err
	})
}

// Remove removes a member; never the last owner. keys are the API keys
// that descend from the member (made by it, or by its keys) and still
// work: they belong to the organization and go on working, so the owner
// is told of them (to revoke those that should not).
func (s *Service) Remove(ctx context.Context, by *Member, id uuid.UUID) (keys []string, err error) {
	// SECURITY: only owners manage members.
	if !by.Can(Owner) {
		return nil, apperr.New(apperr.Forbidden, "only owners remove members")
	}
	err = s.Store.Tenant(ctx, by.OrgID, func(q *dbq.Queries) error {
		if err := ownerNow(ctx, q, by, "only owners remove members"); err != nil {
			return err
		}
		target, err := q.GetMember(ctx, dbq.GetMemberParams{OrgID: by.OrgID, ID: id})
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.New(apperr.NotFound, "member not found")
		}
		if err != nil {
			return err
		}
		if target.Role == string(Owner) {
			if err := lastOwner(ctx, q, by.OrgID); err != nil {
				return err
			}
		}
		if err := q.WithdrawInvitesBy(ctx, dbq.WithdrawInvitesByParams{OrgID: by.OrgID, CreatedBy: id}); err != nil {
			return err
		}
		// And the invitations of the member's own email nobody followed
		// (one sent twice, the member joining with the other): one would
		// make them a member again. Before the member's deletion: an
		// invitation being followed now (its link locked) is waited for,
		// and fails on the member still there; one sent after this
		// commits is the owners' new decision (InviteMember takes the
		// owners' rows first, as ownerNow did here).
		if _, err := q.WithdrawInvites(ctx, dbq.WithdrawInvitesParams{OrgID: by.OrgID, Email: target.Email}); err != nil {
			return err
		}
		made, err := q.ActiveKeysOfMember(ctx, dbq.ActiveKeysOfMemberParams{OrgID: by.OrgID, Member: target.Email})
		if err != nil {
			return err
		}
		for _, k := range made {
			keys = append(keys, k.Name+" ("+k.DisplayPrefix+"…)")
		}
		if _, err = q.DeleteMember(ctx, dbq.DeleteMemberParams{OrgID: by.OrgID, ID: id}); err != nil {
			return err
		}
		// After the member's deletion, which waits for a sign-in link
		// being made for them at this moment (SignInLink locks their row):
		// that link is deleted too, and any made later is refused.
		return q.DeleteSigninLinksFor(ctx, dbq.DeleteSigninLinksForParams{OrgID: by.OrgID, Email: target.Email})
	})
	return keys, err
}

// ownerNow checks that by is an owner of its organization as the database
// holds it now, in the transaction that acts for them. SECURITY: by was
// read when the request began (console.signedIn); an owner demoted or
// removed by another owner meanwhile must not act on that stale read (a
// demoted owner promoting themselves back, a removed one promoting a
// confederate). The owners' rows are locked first, in one statement as
// lastOwner locks them (so that two owners' changes take turns without a
// deadlock): by stays an owner until this transaction ends. A Member with
// no id (tooling and tests acting as the organization's owner) is not
// checked.
func ownerNow(ctx context.Context, q *dbq.Queries, by *Member, refusal string) error {
	if by.ID == uuid.Nil {
		return nil
	}
	if _, err := q.CountOwners(ctx, by.OrgID); err != nil {
		return err
	}
	r, err := q.GetMember(ctx, dbq.GetMemberParams{OrgID: by.OrgID, ID: by.ID})
	if errors.Is(err, pgx.ErrNoRows) || err == nil && r.Role != string(Owner) {
		return apperr.New(apperr.Forbidden, "%s", refusal)
	}
	return err
}

func lastOwner(ctx context.Context, q *dbq.Queries, org uuid.UUID) error {
	n, err := q.CountOwners(ctx, org)
	if err != nil {
		return err
	}
	if n <= 1 {
		return apperr.New(apperr.FailedPrecondition, "an organization keeps at least one owner")
	}
	return nil
}

// SetOperator makes the member with email a platform operator (or not):
// parley admin operator's, and nothing else's.
func (s *Service) SetOperator(ctx context.Context, email string, on bool) (*Member, error) {
	email, err := NormalizeEmail(email)
	if err != nil {
		return nil, err
	}
	var row dbq.Member
	err = s.Store.MemberEmail(ctx, email, func(q *dbq.Queries) (err error) {
		row, err = q.MemberByEmail(ctx, email)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, apperr.New(apperr.NotFound, "no member has the email %s", email)
	}
	if err != nil {
		return nil, err
	}
	// The command line's transaction: the database lets no other change
	// the flag (migration 00026).
	err = s.Store.CommandLine(ctx, row.OrgID, func(q *dbq.Queries) error {
		_, err := q.SetOperator(ctx, dbq.SetOperatorParams{OrgID: row.OrgID, ID: row.ID, Operator: on})
		return err
	})
	row.Operator = on
	return fromRow(row), err
}

// LinkRetention is how long a sign-in link or an invitation is kept once
// used or expired (PruneLinks): long enough to tell someone why theirs no
// longer works, after which the email it was sent to is not kept on for
// ever.
const LinkRetention = 7 * 24 * time.Hour

// pruneLinksBatch bounds one transaction of PruneLinks.
const pruneLinksBatch = 1000

// PruneLinks deletes, in every organization, the sign-in links and
// invitations used or expired before before, and returns how many. It is
// the console's periodic sweep, and stops between batches when ctx ends.
func PruneLinks(ctx context.Context, store *db.Store, before time.Time) (int64, error) {
	return db.InBatches(ctx, pruneLinksBatch, func() (n int64, err error) {
		err = store.ExpiredLinks(ctx, before, func(q *dbq.Queries) (err error) {
			n, err = q.PruneMemberLinks(ctx, dbq.PruneMemberLinksParams{Before: before, MaxRows: pruneLinksBatch})
			return err
		})
		return n, err
	})
}
