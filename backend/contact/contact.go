// Package contact keeps an organization's contacts: the people its visitors
// said they are, from a chat request's `contact` field or an agent's
// lead_capture tool, merged into one contact per email (else phone number),
// and ContactService, which reads them.
//
// It must never read or merge across organizations: every query names the
// organization it runs for, inside that organization's tenant transaction.
package contact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"buf.build/go/protovalidate"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db/dbq"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/phone"
	"github.com/parleyhq/parley/backend/webhook"
)

// MaxNote bounds one note, in characters.
const MaxNote = 1000

// MaxCustomFields bounds a request's custom fields, and MaxStoredCustomFields
// what a contact keeps of all of them, in bytes of JSON: new keys, request
// after request, would otherwise grow one value without end (migration
// 00021 holds the stored bound as a CHECK).
const (
	MaxCustomFields       = 16 << 10
	MaxStoredCustomFields = 32 << 10
)

// Fields are what is known of a contact at one moment; empty fields are
// unknown, and never erase what is stored.
type Fields struct {
	Email, PhoneNumber, FirstName, LastName string
	// Note is added after the contact's notes.
	Note string
	// CustomFields is a JSON object laid over the stored one; nil: none.
	CustomFields []byte
	// Unverified marks fields said by someone the organization has not
	// authenticated: a public agent's visitor, or a conversation's words
	// the model passed to lead_capture. Anyone can type another person's
	// email or number, so they change nothing a contact holds: they fill
	// what it lacks, but for an email, which would change whom a phone-only
	// contact is kept by (an email with its number is a new contact then);
	// a phone number, name or custom field that differs from the stored one
	// is written in the contact's notes instead; and they take at most half
	// of a contact's notes and custom fields (MergeContact), so that
	// nothing the organization writes itself is pushed out or refused.
	Unverified bool
}

// Normalize trims f, lowercases its email and drops the spaces, dots,
// dashes and brackets people write in phone numbers ("+33 6 12-34-56-78",
// phone.Normalize),
// then checks it by the schema's rules for a contact (parley.v1.Contact: an
// email address, an E.164 phone number, names of at most 200 characters)
// and the note's length; no field may hold NUL or bytes that are not
// UTF-8 (Storable). An error is Invalid and names the field as JSON
// does (phoneNumber).
func (f *Fields) Normalize() error {
	f.Email = strings.ToLower(strings.TrimSpace(f.Email))
	f.PhoneNumber = phone.Normalize(f.PhoneNumber)
	f.FirstName, f.LastName, f.Note = strings.TrimSpace(f.FirstName), strings.TrimSpace(f.LastName), strings.TrimSpace(f.Note)
	// A chat request's fields were checked at the edge (wire.NoNUL); a
	// model's tool arguments were not, and Postgres refuses NUL in text.
	for _, v := range [...]struct{ field, s string }{
		{"email", f.Email}, {"phoneNumber", f.PhoneNumber}, {"firstName", f.FirstName}, {"lastName", f.LastName}, {"note", f.Note},
	} {
		if !Storable(v.s) {
			return apperr.InvalidField(v.field, "must be UTF-8 text without NUL characters (U+0000)")
		}
	}
	if f.Email == "" && f.PhoneNumber == "" {
		return apperr.InvalidField("email", "an email or a phoneNumber is needed")
	}
	if n := utf8.RuneCountInString(f.Note); n > MaxNote {
		return apperr.InvalidField("note", "at most %d characters, not %d", MaxNote, n)
	}
	if f.PhoneNumber != "" && !phone.Valid(f.PhoneNumber) {
		return apperr.InvalidField("phoneNumber", "must be in international (E.164) format: a plus, the country code and the number, e.g. +33612345678")
	}
	err := protovalidate.Validate(&parleyv1.Contact{Email: f.Email, PhoneNumber: f.PhoneNumber, FirstName: f.FirstName, LastName: f.LastName})
	var verr *protovalidate.ValidationError
	if errors.As(err, &verr) && len(verr.Violations) > 0 {
		v := verr.Violations[0]
		field := v.FieldDescriptor.JSONName()
		msg := v.Proto.GetMessage()
		if field == "phoneNumber" {
			msg = "must be in international (E.164) format: a plus, the country code and the number, e.g. +33612345678"
		}
		return apperr.InvalidField(field, "%s", msg)
	}
	return err
}

// Storable says whether s can go into a text column: UTF-8 without NUL,
// which Postgres refuses.
func Storable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// FromRequest is a chat request's contact as Fields; ok is false when it
// names nobody (no email, no phone number). Its fields were checked by the
// schema already.
func FromRequest(c *parleyv1.Contact) (f Fields, ok bool, err error) {
	if c == nil || (c.GetEmail() == "" && c.GetPhoneNumber() == "") {
		return Fields{}, false, nil
	}
	f = Fields{Email: c.GetEmail(), PhoneNumber: c.GetPhoneNumber(), FirstName: c.GetFirstName(), LastName: c.GetLastName()}
	if c.GetCustomFields() != nil {
		if f.CustomFields, err = c.GetCustomFields().MarshalJSON(); err != nil {
			return Fields{}, false, apperr.InvalidField("contact.customFields", "must be a JSON object")
		}
		if n := len(f.CustomFields); n > MaxCustomFields {
			return Fields{}, false, apperr.InvalidField("contact.customFields", "at most %d bytes of JSON, not %d", MaxCustomFields, n)
		}
	}
	if err := f.Normalize(); err != nil {
		var e *apperr.Error
		if errors.As(err, &e) && e.Field != "" {
			return Fields{}, false, apperr.InvalidField("contact."+e.Field, "%s", strings.TrimPrefix(e.Message, e.Field+": "))
		}
		return Fields{}, false, err
	}
	return f, true, nil
}

// Merge records f (normalized) in org's contacts and returns the contact's
// id, and whether it is a new contact. The contact is, in order: the one with f's email; the conversation's
// own contact (prefer, may be nil) when f does not change what identifies
// it; the one with f's phone number (without an email, when f brings one);
// else a new one. What f adds is merged in (Fields).
//
// It runs in the caller's tenant transaction for org, tx. Two requests
// creating the same contact at once both end with it: the second finds it.
// So do two giving one email at once, one to a new contact and one to a
// contact without an email (found by phone number or as the conversation's):
// the second finds the first's. Two giving a contact without an email two
// different ones at once: the second makes a new contact, never replacing
// the first's email. A contact deleted between its read and its update is
// looked for again, and made anew when none is left.
func Merge(ctx context.Context, tx pgx.Tx, org uuid.UUID, f Fields, prefer *uuid.UUID) (id uuid.UUID, created bool, err error) {
	q := dbq.New(tx)
	custom := f.CustomFields
	if custom == nil {
		custom = []byte("{}")
	}
	email, phone := optional(f.Email), optional(f.PhoneNumber)
	for range 3 {
		target, err := find(ctx, q, org, f, prefer)
		if err != nil {
			return uuid.Nil, false, err
		}
		if target != nil {
			// SECURITY: target was read by org; the update names org too.
			merge := dbq.MergeContactParams{
				OrgID: org, ID: target.ID, Email: email, PhoneNumber: phone,
				FirstName: f.FirstName, LastName: f.LastName, CustomFields: custom, Note: f.Note,
				FillOnly: f.Unverified,
			}
			if f.Unverified {
				merge.Note = withUnapplied(f.Note, unapplied(*target, f))
			}
			var id uuid.UUID
			if target.Email != nil || email == nil {
				id, err = q.MergeContact(ctx, merge)
			} else {
				id, err = mergeNewEmail(ctx, tx, merge)
			}
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				// Deleted meanwhile (DeleteContact), or given another email
				// (MergeContact keeps it): find another, or make it anew.
				continue
			case emailTaken(err):
				continue // given to another contact meanwhile: find it
			}
			return id, false, tooMany(err)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return uuid.Nil, false, err
		}
		got, err := q.InsertContact(ctx, dbq.InsertContactParams{
			OrgID: org, ID: id, Email: email, PhoneNumber: phone,
			FirstName: f.FirstName, LastName: f.LastName, CustomFields: custom, Note: f.Note,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			continue // created meanwhile: find it
		}
		// A new contact's custom fields can pass the bound too: a request
		// holds them to MaxCustomFields as sent, and a number is written out
		// in full as stored (1e308, 6 bytes sent, keeps 309 digits).
		return got, err == nil, tooMany(err)
	}
	return uuid.Nil, false, apperr.New(apperr.Aborted, "the contact is being changed by another request; retry")
}

// mergeNewEmail merges into a contact that has no email one that another
// transaction may have given another contact since find looked
// (contacts_org_email refuses it): in a savepoint, so that the caller's
// transaction outlives the refusal. Only this update can break a unique
// index: the inserts do nothing on a conflict, and a contact with an email
// is not kept by its phone number.
func mergeNewEmail(ctx context.Context, tx pgx.Tx, merge dbq.MergeContactParams) (uuid.UUID, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return uuid.Nil, err
	}
	id, err := dbq.New(sp).MergeContact(ctx, merge)
	if err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			// The transaction is lost: not an email to look up again.
			return uuid.Nil, fmt.Errorf("%v; then rolling back to its savepoint: %w", err, rerr)
		}
		return uuid.Nil, err
	}
	return id, sp.Commit(ctx)
}

// tooMany is err, or Invalid naming contact.customFields when it is
// contacts_custom_fields_size refusing what a merge or an insert would keep.
func tooMany(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23514" && pe.ConstraintName == "contacts_custom_fields_size" {
		return apperr.InvalidField("contact.customFields",
			"the contact's custom fields, with these, would pass %d bytes of JSON as stored (where a number is written out in full: 1e308 is 309 digits)", MaxStoredCustomFields)
	}
	return err
}

// emailTaken reports whether err is contacts_org_email refusing an email
// another contact of the organization has.
func emailTaken(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "contacts_org_email"
}

// EmitCreated emits lead.created for the contact id that Merge has just
// created in tx (org's tenant transaction), its data the contact as the
// Connect API's GetContact gives it (protojson).
func EmitCreated(ctx context.Context, tx pgx.Tx, hooks *webhook.Emitter, org, id uuid.UUID) error {
	return hooks.Emit(ctx, tx, org, webhook.LeadCreated, func() (proto.Message, error) {
		// SECURITY: read by org, in org's tenant transaction.
		c, err := dbq.New(tx).GetContact(ctx, dbq.GetContactParams{OrgID: org, ID: id})
		if err != nil {
			return nil, err
		}
		return Record(c)
	})
}

// find is the contact f merges into, nil when f is a new contact.
func find(ctx context.Context, q *dbq.Queries, org uuid.UUID, f Fields, prefer *uuid.UUID) (*dbq.Contact, error) {
	if f.Email != "" {
		c, err := q.ContactByEmail(ctx, dbq.ContactByEmailParams{OrgID: org, Email: &f.Email})
		if err == nil || !errors.Is(err, pgx.ErrNoRows) {
			return ptr(c, err)
		}
	}
	if prefer != nil {
		c, err := q.GetContact(ctx, dbq.GetContactParams{OrgID: org, ID: *prefer})
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		// The conversation's contact takes what f brings unless f would
		// change what it is kept by: its email, or (without one) its phone.
		if err == nil && keeps(c, f) && !(f.Unverified && c.Email == nil && f.Email != "") {
			return &c, nil
		}
	}
	if f.PhoneNumber == "" {
		return nil, nil
	}
	c, err := q.ContactByPhone(ctx, dbq.ContactByPhoneParams{OrgID: org, PhoneNumber: &f.PhoneNumber})
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && f.Email != "" && (c.Email != nil || f.Unverified)) {
		// None; or one with another email, or without one that an
		// unverified email would claim: f's email makes a new contact.
		return nil, nil
	}
	return ptr(c, err)
}

// unapplied lists what f says of c that differs from what c holds, which
// an unverified merge does not change: "" when nothing.
func unapplied(c dbq.Contact, f Fields) string {
	var said []string
	differs := func(stored, given string) bool { return stored != "" && given != "" && stored != given }
	if differs(deref(c.PhoneNumber), f.PhoneNumber) {
		said = append(said, "phone number "+f.PhoneNumber)
	}
	if differs(c.FirstName, f.FirstName) {
		said = append(said, "first name "+f.FirstName)
	}
	if differs(c.LastName, f.LastName) {
		said = append(said, "last name "+f.LastName)
	}
	var stored, given map[string]json.RawMessage
	if json.Unmarshal(c.CustomFields, &stored) == nil && json.Unmarshal(f.CustomFields, &given) == nil {
		for _, k := range slices.Sorted(maps.Keys(given)) {
			if old, ok := stored[k]; ok && !jsonEqual(old, given[k]) {
				said = append(said, "custom field "+strconv.Quote(k))
			}
		}
	}
	if len(said) == 0 {
		return ""
	}
	return "Also said, not applied (the contact holds its own): " + strings.Join(said, ", ") + "."
}

// withUnapplied is note followed by the line unapplied wrote, if any.
func withUnapplied(note, line string) string {
	switch {
	case line == "":
		return note
	case note == "":
		return line
	}
	return note + "\n" + line
}

// jsonEqual reports whether two JSON values are the same value.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// keeps reports whether merging f into c leaves what c is kept by as it is.
func keeps(c dbq.Contact, f Fields) bool {
	if c.Email != nil {
		return f.Email == "" // an email of its own: another email is another contact
	}
	return f.Email != "" || f.PhoneNumber == deref(c.PhoneNumber)
}

func ptr(c dbq.Contact, err error) (*dbq.Contact, error) {
	if err != nil {
		return nil, err
	}
	return &c, nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
