package compat

import (
	"net/http"
	"strconv"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/contact"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
)

// WithContacts adds the contact paths.
func (h *Handler) WithContacts(cs parleyv1connect.ContactServiceHandler) *Handler {
	h.contacts = cs
	return h
}

func contactJSON(c *parleyv1.ContactRecord) map[string]any {
	out := map[string]any{
		"id": c.GetId(), "firstName": c.GetFirstName(), "lastName": c.GetLastName(),
		"customFields": c.GetCustomFields().AsMap(), "notes": c.GetNotes(),
		"createdAt": ts(c.GetCreateTime()), "updatedAt": ts(c.GetUpdateTime()),
	}
	// Unknown is absent, as a contact has an email, a phone number or both.
	if e := c.GetEmail(); e != "" {
		out["email"] = e
	}
	if p := c.GetPhoneNumber(); p != "" {
		out["phoneNumber"] = p
	}
	return out
}

func (h *Handler) listContacts(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	req := &parleyv1.ListContactsRequest{Email: q.Get("email"), Q: q.Get("q"), Cursor: q.Get("cursor")}
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 32)
		if err != nil || n < 1 || n > contact.MaxLimit {
			return apperr.InvalidField("limit", "must be an integer from 1 to %d", contact.MaxLimit)
		}
		req.Limit = int32(n)
	}
	return respond(h, w, r, req, h.contacts.ListContacts, http.StatusOK, func(resp *parleyv1.ListContactsResponse) any {
		items := make([]map[string]any, 0, len(resp.GetContacts()))
		for _, c := range resp.GetContacts() {
			items = append(items, contactJSON(c))
		}
		var next any // null on the last page
		if n := resp.GetNextCursor(); n != "" {
			next = n
		}
		return map[string]any{"contacts": items, "nextCursor": next}
	})
}

func (h *Handler) getContact(w http.ResponseWriter, r *http.Request) error {
	return respond(h, w, r, &parleyv1.GetContactRequest{Id: r.PathValue("id")}, h.contacts.GetContact, http.StatusOK,
		func(resp *parleyv1.GetContactResponse) any {
			out := contactJSON(resp.GetContact())
			out["conversationIds"] = resp.GetConversationIds()
			return out
		})
}

// deleteContact is DELETE /api/contacts/{id} → {id, deleted}.
func (h *Handler) deleteContact(w http.ResponseWriter, r *http.Request) error {
	req := &parleyv1.DeleteContactRequest{Id: r.PathValue("id")}
	return respond(h, w, r, req, h.contacts.DeleteContact, http.StatusOK,
		func(*parleyv1.DeleteContactResponse) any { return map[string]any{"id": req.GetId(), "deleted": true} })
}
