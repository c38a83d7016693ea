package console_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/member"
)

// Every posted form but a datasource's upload is read at the console's
// form bound (1 MiB), multipart ones too: a multipart post to any other
// route is refused with 413 before its handler parses it (r.PostFormValue
// would keep up to the upload's 20 MiB in memory), and changes nothing.
func testMultipartFormBound(t *testing.T, e *env) {
	org := e.Bootstrap("Bounded forms", "pro")
	agent := apiID(t, e, "/api/agents", org.Key, map[string]any{"name": "Desk", "instructions": "Help."})
	chat(t, e, org.Key, agent, "bound-1", "v1", "hello")
	admin := e.as(t, org.ID, member.Admin)
	viewer := e.as(t, org.ID, member.Viewer)
	big := bytes.Repeat([]byte("z"), 3<<20)

	messages := func() int {
		p := admin.get("/console/conversations/bound-1")
		require.Equal(t, http.StatusOK, p.Status, p.Body)
		return p.Doc.Find("[data-testid=message]").Length()
	}
	before := messages()
	p := admin.postFile("/console/conversations/bound-1/reply", url.Values{"text": {"sent with 3 MiB"}}, "pad", "pad.txt", big)
	require.Equal(t, http.StatusRequestEntityTooLarge, p.Status, p.Body)
	require.Contains(t, p.Text("[data-testid=error]"), "larger than")
	require.Equal(t, before, messages(), "the oversized reply was stored")

	// A viewer's own route: refused the same way.
	p = viewer.postFile("/console/members/password", url.Values{"current_password": {Password}, "password": {"another long passphrase"},
		"confirm": {"another long passphrase"}}, "pad", "pad.txt", big)
	require.Equal(t, http.StatusRequestEntityTooLarge, p.Status, p.Body)
	_, err := e.members.SignInPassword(context.Background(), viewer.Member.Email, Password)
	require.NoError(t, err, "the password changed")

	// A small multipart form still works; a datasource's upload still takes
	// more than the form bound.
	p = admin.postFile("/console/conversations/bound-1/reply", url.Values{"text": {"small multipart"}}, "pad", "pad.txt", []byte("x"))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
	store := apiID(t, e, "/api/datastores", org.Key, map[string]any{"name": "Big files"})
	p = admin.postFile("/console/datastores/"+store+"/sources", nil, "file", "notes.txt", []byte(strings.Repeat("Opening hours are nine to five. ", 50000)))
	require.Equal(t, http.StatusSeeOther, p.Status, p.Body)
}

// A new password is UTF-8 text without NUL, as a browser sends: one of
// other bytes (a crafted post) is refused, naming the field, and the
// password stays.
func testPasswordBytes(t *testing.T, e *env) {
	org := e.Bootstrap("Password bytes", "pro")
	for _, bad := range []string{strings.Repeat("\x00", 12), strings.Repeat("\xff", 12), "correct horse\x00battery"} {
		c := e.as(t, org.ID, member.Admin)
		p := c.post("/console/members/password", url.Values{"current_password": {Password}, "password": {bad}, "confirm": {bad}})
		require.Equal(t, http.StatusBadRequest, p.Status, "%q: %s", bad, p.Body)
		require.Contains(t, p.Text("[data-testid=password-error]"), "password")
		_, err := e.members.SignInPassword(context.Background(), c.Member.Email, Password)
		require.NoError(t, err, "%q: the password changed", bad)
	}
}
