package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/member"
)

// memberRow is the row of the members page for email.
func memberRow(t *testing.T, p page, email string) *goquery.Selection {
	t.Helper()
	var row *goquery.Selection
	p.Doc.Find("[data-testid=member-row]").Each(func(_ int, s *goquery.Selection) {
		if strings.TrimSpace(s.Find("[data-testid=member-email]").Text()) == email {
			row = s
		}
	})
	require.NotNil(t, row, "no row for %s", email)
	return row
}

func testMembers(t *testing.T, e *env) {
	ctx := context.Background()
	org := e.Bootstrap("Members Inc", "pro")
	owner := e.as(t, org.ID, member.Owner)
	p := owner.get("/console/members")
	require.Equal(t, http.StatusOK, p.Status, p.Body)
	memberRow(t, p, owner.Member.Email)
	require.Equal(t, 1, p.Doc.Find("[data-testid=invite]").Length())

	// An invitation: the link is shown once, a full URL.
	email := fmt.Sprintf("invitee%d@example.com", seq.Add(1))
	p = owner.post("/console/members/invite", url.Values{"email": {email}, "role": {"admin"}})
	require.Equal(t, http.StatusCreated, p.Status, p.Body)
	link := p.Text("[data-testid=invite-link]")
	require.Equal(t, 1, p.Doc.Find(`[data-copy="#invite-link"]`).Length())
	u, err := url.Parse(link)
	require.NoError(t, err)
	require.Equal(t, "/console/link", u.Path)
	require.Equal(t, "1", u.Query().Get("invite"))
	token := u.Query().Get("token")
	require.NotEmpty(t, token)
	p = owner.get("/console/members")
	require.NotContains(t, p.Body, token, "the invitation link was shown again")
	require.Contains(t, p.Text("[data-testid=invites]"), email)
	require.Contains(t, p.Text("[data-testid=invites]"), "admin")

	// The invitee, in a browser of their own, follows it.
	n := e.anon(t)
	require.Equal(t, http.StatusOK, n.get(u.RequestURI()).Status)
	p = n.post("/console/link", url.Values{"token": {token}, "invite": {"1"}, "password": {Password}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	p = n.get("/console/members")
	require.Equal(t, http.StatusOK, p.Status)
	require.Equal(t, "admin", strings.TrimSpace(memberRow(t, p, email).Find("[data-testid=member-role]").Text()))
	require.Zero(t, p.Doc.Find("[data-testid=invite], [data-testid=role-form], [data-testid=remove-form]").Length(),
		"an admin is shown owner actions")
	require.Zero(t, owner.get("/console/members").Doc.Find("[data-testid=invites]").Length(), "a used invitation is pending")
	invitee, err := e.members.SignInPassword(ctx, email, Password)
	require.NoError(t, err)
	require.Equal(t, member.Admin, invitee.Role)
	require.Equal(t, org.ID, invitee.OrgID)
	require.Equal(t, http.StatusOK, n.get("/console/keys").Status)
	// Inviting a member again: 409.
	p = owner.post("/console/members/invite", url.Values{"email": {email}, "role": {"viewer"}})
	require.Equal(t, http.StatusConflict, p.Status)
	require.Contains(t, p.Text("[data-testid=invite-error]"), "already a member")

	// Role change: the invitee becomes a viewer, and loses the keys page.
	rolePath := "/console/members/" + invitee.ID.String() + "/role"
	p = owner.post(rolePath, url.Values{"role": {"viewer"}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, http.StatusForbidden, n.get("/console/keys").Status)
	require.Equal(t, "viewer", memberRow(t, owner.get("/console/members"), email).Find("option[selected]").AttrOr("value", ""))
	p = owner.post(rolePath, url.Values{"role": {"god"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), "role")

	// Admins and viewers: no owner action, 403.
	adm := e.as(t, org.ID, member.Admin)
	for _, c := range []*client{adm, n} {
		require.Equal(t, http.StatusForbidden, c.post("/console/members/invite", url.Values{"email": {"x@example.com"}, "role": {"owner"}}).Status)
		require.Equal(t, http.StatusForbidden, c.post(rolePath, url.Values{"role": {"owner"}}).Status)
		require.Equal(t, http.StatusForbidden, c.post("/console/members/"+owner.Member.ID.String()+"/remove", nil).Status)
	}
	self, err := e.members.Get(ctx, org.ID, invitee.ID)
	require.NoError(t, err)
	require.Equal(t, member.Viewer, self.Role, "a viewer changed its role")

	// The last owner is neither demoted nor removed.
	lastOwner := "an organization keeps at least one owner"
	p = owner.post("/console/members/"+owner.Member.ID.String()+"/role", url.Values{"role": {"admin"}})
	require.Equal(t, http.StatusUnprocessableEntity, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), lastOwner)
	p = owner.post("/console/members/"+owner.Member.ID.String()+"/remove", nil)
	require.Equal(t, http.StatusUnprocessableEntity, p.Status)
	require.Contains(t, p.Text("[data-testid=error]"), lastOwner)

	// Another organization's member: not found, and unchanged.
	other := e.as(t, e.B.ID, member.Viewer)
	for _, path := range []string{"/role", "/remove"} {
		p = owner.post("/console/members/"+other.Member.ID.String()+path, url.Values{"role": {"owner"}})
		require.Equal(t, http.StatusNotFound, p.Status, path)
	}
	still, err := e.members.Get(ctx, e.B.ID, other.Member.ID)
	require.NoError(t, err)
	require.Equal(t, member.Viewer, still.Role)
	require.Equal(t, http.StatusNotFound, owner.post("/console/members/not-an-id/remove", nil).Status)

	// Removal: the member's session ends.
	p = owner.post("/console/members/"+invitee.ID.String()+"/remove", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, http.StatusSeeOther, n.get("/console/members").Status)
	_, err = e.members.Get(ctx, org.ID, invitee.ID)
	require.Equal(t, "member not found", err.Error())

	// Keys are the organization's and outlive their maker: the keys page
	// says who made each, and removing a member names the keys that
	// descend from it and still work.
	admin := e.as(t, org.ID, member.Admin)
	p = admin.post("/console/keys", url.Values{"name": {"deploy bot"}, "scopes": {"chat", "admin"}})
	require.Equal(t, http.StatusCreated, p.Status, p.Body)
	made := p.Text("[data-testid=secret]")
	keys := owner.get("/console/keys")
	var by []string
	keys.Doc.Find("[data-testid=key-row]").Each(func(_ int, s *goquery.Selection) {
		by = append(by, strings.TrimSpace(s.Find("td").First().Text())+" by "+strings.TrimSpace(s.Find("[data-testid=key-creator]").Text()))
	})
	require.Contains(t, by, "deploy bot by "+admin.Member.Email)
	// A key that key made descends from the member too.
	r := e.api(t, "POST", "/parley.v1.ApiKeyService/CreateApiKey", made, map[string]any{"name": "grandchild", "scopes": []string{"chat"}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	p = owner.post("/console/members/"+admin.Member.ID.String()+"/remove", nil)
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	flash := owner.get("/console/members").Text("[data-testid=flash]")
	require.Contains(t, flash, "still work: grandchild (")
	require.Contains(t, flash, ", deploy bot (")
}

func testMembersEscaping(t *testing.T, e *env) {
	org := e.Bootstrap(`"><img src=x onerror=alert(9)>`, "free")
	owner := e.as(t, org.ID, member.Owner)
	evil := `"><img src=x onerror=alert(1)>@x.com`
	p := owner.post("/console/members/invite", url.Values{"email": {evil}, "role": {"viewer"}})
	require.Equal(t, http.StatusBadRequest, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=invite-error]"), "email")
	require.Equal(t, evil, p.Doc.Find("#invite-email").AttrOr("value", ""), "the form keeps what was typed, as text")
	for _, pg := range []page{p, owner.get("/console/members")} {
		require.Zero(t, pg.Doc.Find("img").Length())
		require.NotContains(t, pg.Body, "<img src=x")
	}
	p = owner.post("/console/members/invite", url.Values{"email": {"someone@example.com"}, "role": {"root"}})
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=invite-error]"), "role")
}

func testMemberPasswords(t *testing.T, e *env) {
	ctx := context.Background()
	c := e.as(t, e.A.ID, member.Viewer)
	newPW := "a brand new passphrase"
	form := func(current, pw, confirm string) url.Values {
		return url.Values{"current_password": {current}, "password": {pw}, "confirm": {confirm}}
	}
	p := c.post("/console/members/password", form("not my password at all", newPW, newPW))
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=password-error]"), "current_password")
	p = c.post("/console/members/password", form(Password, newPW, newPW+"x"))
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=password-error]"), "confirm")
	p = c.post("/console/members/password", form(Password, "short", "short"))
	require.Equal(t, http.StatusBadRequest, p.Status)
	require.Contains(t, p.Text("[data-testid=password-error]"), "password")

	old := c.http.Jar.Cookies(mustURL(t, e.URL))
	elsewhere := e.anon(t) // the same member signed in on another browser
	p = elsewhere.post("/console/signin", url.Values{"email": {c.Member.Email}, "password": {Password}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, http.StatusOK, elsewhere.get("/console/").Status)
	p = c.post("/console/members/password", form(Password, newPW, newPW))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.Equal(t, http.StatusOK, c.get("/console/members").Status, "the session ended with the change")
	replay := e.anon(t)
	replay.http.Jar.SetCookies(mustURL(t, e.URL), old)
	require.Equal(t, http.StatusSeeOther, replay.get("/console/").Status, "the session token was not renewed")
	require.Equal(t, http.StatusSeeOther, elsewhere.get("/console/").Status, "another session outlived the password change")
	_, err := e.members.SignInPassword(ctx, c.Member.Email, Password)
	require.Error(t, err)
	_, err = e.members.SignInPassword(ctx, c.Member.Email, newPW)
	require.NoError(t, err)

	// A member who signs in with links sets a first password without one.
	org := e.Bootstrap("Links only", "free")
	email := fmt.Sprintf("links%d@example.com", seq.Add(1))
	_, err = e.members.CreateOwner(ctx, org.ID, email)
	require.NoError(t, err)
	token, err := e.members.SignInLink(ctx, org.ID, email)
	require.NoError(t, err)
	l := e.anon(t)
	require.Equal(t, http.StatusSeeOther, l.post("/console/link", url.Values{"token": {token}}).Status)
	p = l.get("/console/members")
	require.Zero(t, p.Doc.Find("#current-password").Length())
	p = l.post("/console/members/password", url.Values{"password": {newPW}, "confirm": {newPW}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	_, err = e.members.SignInPassword(ctx, email, newPW)
	require.NoError(t, err)
}

// An invitation stops working when an owner withdraws it, and when the owner
// who made it is removed or is no longer an owner (even if their
// invitations were not withdrawn): nobody is left a way back in.
func testInvitationsWithdrawn(t *testing.T, e *env) {
	ctx := context.Background()
	org := e.Bootstrap("Invites Inc", "pro")
	owner := e.as(t, org.ID, member.Owner)
	invite := func(by *client, role string) (email, token string) {
		t.Helper()
		email = fmt.Sprintf("invited%d@example.com", seq.Add(1))
		p := by.post("/console/members/invite", url.Values{"email": {email}, "role": {role}})
		require.Equal(t, http.StatusCreated, p.Status, p.Body)
		u, err := url.Parse(p.Text("[data-testid=invite-link]"))
		require.NoError(t, err)
		return email, u.Query().Get("token")
	}
	follows := func(email, token string) bool {
		t.Helper()
		p := e.anon(t).post("/console/link", url.Values{"token": {token}, "invite": {"1"}, "password": {Password}})
		_, err := e.members.SignInPassword(ctx, email, Password)
		require.Equal(t, err == nil, p.Status == http.StatusSeeOther, "%d %s", p.Status, p.Body)
		return err == nil
	}
	pending := func() string { return owner.get("/console/members").Text("[data-testid=invites]") }

	// Withdrawn from the members page.
	email, token := invite(owner, "admin")
	p := owner.get("/console/members")
	require.Equal(t, 1, p.Doc.Find("[data-testid=withdraw-form]").Length(), p.Body)
	require.Equal(t, email, p.Doc.Find("[data-testid=withdraw-form] input[name=email]").AttrOr("value", ""))
	admin := e.as(t, org.ID, member.Admin)
	require.Zero(t, admin.get("/console/members").Doc.Find("[data-testid=withdraw-form]").Length(), "an admin is offered to withdraw")
	require.Equal(t, http.StatusForbidden, admin.post("/console/members/invites/withdraw", url.Values{"email": {email}}).Status)
	other := e.as(t, e.B.ID, member.Owner)
	require.Equal(t, http.StatusNotFound, other.post("/console/members/invites/withdraw", url.Values{"email": {email}}).Status,
		"another organization's owner withdrew it")
	require.Contains(t, pending(), email)
	p = owner.post("/console/members/invites/withdraw", url.Values{"email": {email}})
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	require.NotContains(t, pending(), email)
	require.False(t, follows(email, token), "a withdrawn invitation was followed")
	require.Equal(t, http.StatusNotFound, owner.post("/console/members/invites/withdraw", url.Values{"email": {email}}).Status)

	// An owner about to be removed invites a second self as owner.
	leaving := e.as(t, org.ID, member.Owner)
	email, token = invite(leaving, "owner")
	require.Contains(t, pending(), email)
	require.Equal(t, http.StatusSeeOther, owner.post("/console/members/"+leaving.Member.ID.String()+"/remove", nil).Status)
	require.NotContains(t, pending(), email)
	require.False(t, follows(email, token), "the invitation of a removed owner was followed")

	// Or is demoted.
	demoted := e.as(t, org.ID, member.Owner)
	email, token = invite(demoted, "owner")
	require.Equal(t, http.StatusSeeOther, owner.post("/console/members/"+demoted.Member.ID.String()+"/role", url.Values{"role": {"admin"}}).Status)
	require.NotContains(t, pending(), email)
	require.False(t, follows(email, token), "the invitation of a demoted owner was followed")

	// The link itself checks its owner: one left in place (here, by
	// demoting its maker behind the service's back) still does not work.
	maker := e.as(t, org.ID, member.Owner)
	email, token = invite(maker, "owner")
	require.NoError(t, e.App.Store.Tenant(ctx, org.ID, func(q *dbq.Queries) error {
		n, err := q.SetMemberRole(ctx, dbq.SetMemberRoleParams{OrgID: org.ID, ID: maker.Member.ID, Role: string(member.Viewer)})
		require.EqualValues(t, 1, n)
		return err
	}))
	require.Contains(t, pending(), email)
	require.False(t, follows(email, token), "the invitation of an owner no longer one was followed")

	// An owner's invitation still works.
	email, token = invite(owner, "viewer")
	require.True(t, follows(email, token))
}
