package console

import (
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/plan"
)

// plansUpTo lists the plans a key of an organization on ceiling may have.
func plansUpTo(ceiling string) []string {
	var out []string
	for _, p := range []string{plan.Free, plan.Starter, plan.Pro, plan.Enterprise} {
		if plan.AtMost(p, ceiling) {
			out = append(out, p)
		}
	}
	return out
}

func (c *Console) keys(w http.ResponseWriter, r *http.Request) {
	c.keysWith(w, r, http.StatusOK, nil, "")
}

func (c *Console) keysWith(w http.ResponseWriter, r *http.Request, status int, created *parleyv1.CreateApiKeyResponse, formErr string) {
	v := viewOf(r.Context())
	req := &parleyv1.ListApiKeysRequest{Cursor: r.URL.Query().Get("cursor")}
	err := c.validate(req)
	var list *parleyv1.ListApiKeysResponse
	if err == nil {
		list, err = c.Accounts.ListApiKeys(r.Context(), req)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	l := keysView{Keys: list.GetApiKeys(), Cursor: req.GetCursor(), Next: list.GetNextCursor()}
	render(w, r, status, keysPage(v, l, plansUpTo(v.Org.GetPlan()), created, formErr))
}

// keysView is a page of the keys list: Cursor the page shown (empty for
// the newest), Next the following page's, empty on the last.
type keysView struct {
	Keys         []*parleyv1.ApiKey
	Cursor, Next string
}

func (c *Console) createKey(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.errorPage(w, r, apperr.New(apperr.Invalid, "unreadable form"))
		return
	}
	req := &parleyv1.CreateApiKeyRequest{Name: strings.TrimSpace(r.PostForm.Get("name")), Scopes: r.PostForm["scopes"]}
	if p := r.PostForm.Get("plan"); p != "" {
		req.Plan = &p
	}
	if e := r.PostForm.Get("expires"); e != "" {
		t, err := time.Parse("2006-01-02", e)
		if err != nil {
			c.keysWith(w, r, http.StatusBadRequest, nil, "expires: not a date")
			return
		}
		// The key works through the whole day it expires on (UTC).
		req.ExpireTime = timestamppb.New(t.Add(24*time.Hour - time.Second))
	}
	err := c.validate(req)
	var resp *parleyv1.CreateApiKeyResponse
	if err == nil {
		resp, err = c.Accounts.CreateApiKey(r.Context(), req)
	}
	if err != nil {
		pub := shown(err)
		if pub.Code == apperr.Internal {
			c.errorPage(w, r, err)
			return
		}
		c.keysWith(w, r, apperr.Lookup(pub.Code).HTTPStatus, nil, pub.Message)
		return
	}
	// The secret is rendered in this response only; it is not kept in the
	// session or anywhere else.
	c.keysWith(w, r, http.StatusCreated, resp, "")
}

func (c *Console) revokeKey(w http.ResponseWriter, r *http.Request) {
	req := &parleyv1.RevokeApiKeyRequest{Id: r.PathValue("id")}
	err := c.validate(req)
	if err == nil {
		_, err = c.Accounts.RevokeApiKey(r.Context(), req)
	}
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.flash(r.Context(), "The key was revoked.")
	http.Redirect(w, r, "/console/keys", http.StatusSeeOther)
}

func keyStatus(k *parleyv1.ApiKey) string {
	switch {
	case k.GetRevokeTime() != nil:
		return "revoked"
	case k.GetExpireTime() != nil && k.GetExpireTime().AsTime().Before(time.Now()):
		return "expired"
	}
	return "active"
}

func ts(t *timestamppb.Timestamp) string {
	if t == nil {
		return "never"
	}
	x := t.AsTime()
	return when(&x)
}

func joinStrings(s []string) string { return strings.Join(s, ", ") }
