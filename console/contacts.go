package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/contact"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// Contacts: the people visitors said they are (a chat request's contact,
// the lead_capture tool), newest first, filtered by email or text; and a
// contact with its conversations.

// contacts reads as the member: its organization scopes every query.
func (c *Console) contacts() *contact.Service {
	return &contact.Service{Store: c.Store}
}

// contactListView is what the contacts page shows.
type contactListView struct {
	Email, Q, Cursor string
	Page             *parleyv1.ListContactsResponse
	Err              string
}

func (c *Console) contactList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := contactListView{Email: q.Get("email"), Q: q.Get("q"), Cursor: q.Get("cursor")}
	req := &parleyv1.ListContactsRequest{Email: d.Email, Q: d.Q, Cursor: d.Cursor, Limit: contact.MaxLimit}
	status := http.StatusOK
	err := c.validate(req)
	if err == nil {
		d.Page, err = c.contacts().ListContacts(r.Context(), req)
	}
	if err != nil {
		// Bad filters show beside the form; anything else is an error page.
		if apperr.CodeOf(err) != apperr.Invalid {
			c.errorPage(w, r, err)
			return
		}
		status, d.Err = http.StatusBadRequest, shown(err).Message
	}
	render(w, r, status, contactListPage(viewOf(r.Context()), d))
}

func (c *Console) contactShow(w http.ResponseWriter, r *http.Request) {
	req := &parleyv1.GetContactRequest{Id: r.PathValue("id")}
	if err := c.validate(req); err != nil {
		c.errorPage(w, r, apperr.New(apperr.NotFound, "contact %q not found", req.GetId()))
		return
	}
	// SECURITY: another organization's contact is not found (errorPage).
	resp, err := c.contacts().GetContact(r.Context(), req)
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	render(w, r, http.StatusOK, contactPage(viewOf(r.Context()), resp))
}

func (c *Console) contactDelete(w http.ResponseWriter, r *http.Request) {
	// SECURITY: another organization's contact is not found (errorPage).
	_, err := c.contacts().DeleteContact(r.Context(), &parleyv1.DeleteContactRequest{Id: r.PathValue("id")})
	if err != nil {
		c.errorPage(w, r, err)
		return
	}
	c.flash(r.Context(), "The contact was deleted; its conversations stay, without it.")
	http.Redirect(w, r, "/console/contacts", http.StatusSeeOther)
}

// contactsURL is the listing's address with these parameters (empty ones
// left out).
func contactsURL(email, q, cursor string) string {
	v := url.Values{}
	for k, x := range map[string]string{"email": email, "q": q, "cursor": cursor} {
		if x != "" {
			v.Set(k, x)
		}
	}
	if len(v) == 0 {
		return "/console/contacts"
	}
	return "/console/contacts?" + v.Encode()
}

// contactCustom is a contact's custom fields as indented JSON.
func contactCustom(k *parleyv1.ContactRecord) string {
	b, err := json.MarshalIndent(k.GetCustomFields().AsMap(), "", "  ")
	if err != nil {
		return ""
	}
	return string(b)
}

// contactName is a contact's name, or a dash when unknown.
func contactName(k *parleyv1.ContactRecord) string {
	if n := strings.TrimSpace(k.GetFirstName() + " " + k.GetLastName()); n != "" {
		return n
	}
	return "—"
}
