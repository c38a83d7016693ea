package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/member"
)

// membersState is what one rendering of the members page shows besides the
// lists: an invitation link just made (shown this once), and the errors of
// its forms.
type membersState struct {
	InviteLink  string
	InviteEmail string
	InviteRole  string
	InviteErr   string
	MemberErr   string
	PasswordErr string
}

var roles = []member.Role{member.Viewer, member.Admin, member.Owner}

func (c *Console) members(w http.ResponseWriter, r *http.Request) {
	c.membersWith(w, r, http.StatusOK, membersState{})
}

func (c *Console) membersWith(w http.ResponseWriter, r *http.Request, status int, st membersState) {
	ctx := r.Context()
	v := viewOf(ctx)
	list, err := c.Members.List(ctx, v.Member.OrgID)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	invites, err := c.Members.Invites(ctx, v.Member.OrgID)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, status, membersPage(v, list, invites, st))
}

// membersFailed shows err on the members page at its status (field errors,
// the last owner, another organization's member); internal errors get the
// error page.
func (c *Console) membersFailed(w http.ResponseWriter, r *http.Request, err error, st membersState, set func(*membersState, string)) {
	pub := shown(err)
	if pub.Code == apperr.Internal {
		c.errorPage(w, r, err)
		return
	}
	set(&st, pub.Message)
	c.membersWith(w, r, apperr.Lookup(pub.Code).HTTPStatus, st)
}

func (c *Console) inviteMember(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := viewOf(ctx)
	email, roleName := strings.TrimSpace(r.PostFormValue("email")), r.PostFormValue("role")
	st := membersState{InviteEmail: email, InviteRole: roleName}
	setErr := func(s *membersState, m string) { s.InviteErr = m }
	role, err := member.ParseRole(roleName)
	if err != nil {
		c.membersFailed(w, r, err, st, setErr)
		return
	}
	token, err := c.Members.InviteMember(ctx, v.Member, email, role)
	if err != nil {
		c.membersFailed(w, r, err, st, setErr)
		return
	}
	// The link is rendered in this response only: the token is kept nowhere
	// but in the owner's hands (the database has its hash).
	st = membersState{InviteEmail: email, InviteRole: string(role), InviteLink: c.inviteURL(token)}
	c.membersWith(w, r, http.StatusCreated, st)
}

// withdrawInvite withdraws the invitations of the form's email: their links
// stop working at once.
func (c *Console) withdrawInvite(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	email := strings.TrimSpace(r.PostFormValue("email"))
	// SECURITY: owners only, this organization's invitations only.
	if err := c.Members.WithdrawInvites(ctx, viewOf(ctx).Member, email); err != nil {
		c.membersFailed(w, r, err, membersState{}, func(s *membersState, m string) { s.MemberErr = m })
		return
	}
	c.flash(ctx, "The invitation of "+email+" was withdrawn.")
	http.Redirect(w, r, "/console/members", http.StatusSeeOther)
}

// inviteURL is the link an invitee follows: the sign-in link page, which
// asks for a password before the invitation is used.
func (c *Console) inviteURL(token string) string {
	return strings.TrimRight(c.PublicURL, "/") + "/console/link?" + url.Values{"token": {token}, "invite": {"1"}}.Encode()
}

// memberID reads the {id} of a member path; one that is no id is a member
// that does not exist.
func memberID(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return uuid.Nil, apperr.New(apperr.NotFound, "member not found")
	}
	return id, nil
}

func (c *Console) setMemberRole(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := viewOf(ctx)
	setErr := func(s *membersState, m string) { s.MemberErr = m }
	id, err := memberID(r)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	role, err := member.ParseRole(r.PostFormValue("role"))
	if err == nil {
		// SECURITY: member.Service checks again that v.Member is an owner,
		// scopes the change to v.Member's organization (another's member is
		// not found) and keeps one owner.
		err = c.Members.SetRole(ctx, v.Member, id, role)
	}
	if err != nil {
		c.membersFailed(w, r, err, membersState{}, setErr)
		return
	}
	c.flash(ctx, "The role was changed.")
	http.Redirect(w, r, "/console/members", http.StatusSeeOther)
}

func (c *Console) removeMember(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := viewOf(ctx)
	id, err := memberID(r)
	var keys []string
	if err == nil {
		// SECURITY: as for roles: owners only, this organization only, never
		// the last owner.
		keys, err = c.Members.Remove(ctx, v.Member, id)
	}
	if err != nil {
		c.membersFailed(w, r, err, membersState{}, func(s *membersState, m string) { s.MemberErr = m })
		return
	}
	if id == v.Member.ID { // removed themselves: the session has no member left
		_ = c.sessions.Destroy(ctx)
		http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
		return
	}
	if len(keys) > 0 {
		// Keys are the organization's and outlive their maker: say which
		// still work, for the owner to revoke those that should not.
		c.flash(ctx, fmt.Sprintf("The member was removed. API keys they made (or that their keys made) still work: %s. Revoke them on the API keys page if they should stop.", strings.Join(keys, ", ")))
	} else {
		c.flash(ctx, "The member was removed.")
	}
	http.Redirect(w, r, "/console/members", http.StatusSeeOther)
}

func (c *Console) changePassword(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := viewOf(ctx)
	setErr := func(s *membersState, m string) { s.PasswordErr = m }
	password := r.PostFormValue("password")
	if password != r.PostFormValue("confirm") {
		c.membersFailed(w, r, apperr.InvalidField("confirm", "does not match the new password"), membersState{}, setErr)
		return
	}
	// SECURITY: guesses at the current password are limited like sign-in's.
	res, err := c.Limits.Allow(ctx, "password-member:"+v.Member.ID.String(), signinLimits)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	if !res.Allowed {
		c.membersFailed(w, r, apperr.New(apperr.RateLimited, "too many attempts; try again %s", refused(w, res)), membersState{}, setErr)
		return
	}
	if err := c.Members.ChangePassword(ctx, v.Member, r.PostFormValue("current_password"), password); err != nil {
		c.membersFailed(w, r, err, membersState{}, setErr)
		return
	}
	// SECURITY: a new session token: one taken before the change (a cookie
	// copied off this browser) does not outlive it.
	// The change ended every other session of the member (a new epoch);
	// this one goes on under it.
	m, err := c.Members.Get(ctx, v.Member.OrgID, v.Member.ID)
	if err == nil {
		err = c.signIn(ctx, m)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.flash(ctx, "Your password was changed; your other sessions are signed out.")
	http.Redirect(w, r, "/console/members", http.StatusSeeOther)
}

// inviteEmailValue refills the invitation form after an error, and empties
// it once a link was made.
func inviteEmailValue(st membersState) string {
	if st.InviteLink != "" {
		return ""
	}
	return st.InviteEmail
}

func inviteRoleValue(st membersState) string {
	if st.InviteLink != "" || st.InviteRole == "" {
		return string(member.Viewer)
	}
	return st.InviteRole
}
