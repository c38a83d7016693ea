package contact_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/contact"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// Normalize tidies what people write and refuses what is not an email
// address or an E.164 phone number, naming the field.
func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		in        contact.Fields
		want      contact.Fields
		wantField string
	}{
		{"email lowercased", contact.Fields{Email: "  Ada@Example.COM "}, contact.Fields{Email: "ada@example.com"}, ""},
		{"phone written with spaces", contact.Fields{PhoneNumber: "+33 6 12-34.56 (78)"}, contact.Fields{PhoneNumber: "+33612345678"}, ""},
		{"names and note trimmed", contact.Fields{Email: "a@b.io", FirstName: " Ada ", LastName: " L ", Note: " wants a quote "},
			contact.Fields{Email: "a@b.io", FirstName: "Ada", LastName: "L", Note: "wants a quote"}, ""},
		{"nobody", contact.Fields{FirstName: "Ada"}, contact.Fields{}, "email"},
		{"not an email", contact.Fields{Email: "ada at example.com"}, contact.Fields{}, "email"},
		{"email without domain", contact.Fields{Email: "ada@"}, contact.Fields{}, "email"},
		{"national phone", contact.Fields{PhoneNumber: "06 12 34 56 78"}, contact.Fields{}, "phoneNumber"},
		{"phone without country", contact.Fields{PhoneNumber: "+0612345678"}, contact.Fields{}, "phoneNumber"},
		{"phone too long", contact.Fields{PhoneNumber: "+1234567890123456"}, contact.Fields{}, "phoneNumber"},
		{"phone with letters", contact.Fields{PhoneNumber: "+33 6 CALL ME"}, contact.Fields{}, "phoneNumber"},
		{"name too long", contact.Fields{Email: "a@b.io", FirstName: strings.Repeat("a", 201)}, contact.Fields{}, "firstName"},
		{"note too long", contact.Fields{Email: "a@b.io", Note: strings.Repeat("é", contact.MaxNote+1)}, contact.Fields{}, "note"},
		// Postgres refuses these in text; a model's arguments may hold them.
		{"NUL in a note", contact.Fields{Email: "a@b.io", Note: "call\x00me"}, contact.Fields{}, "note"},
		{"NUL in a name", contact.Fields{Email: "a@b.io", LastName: "\x00"}, contact.Fields{}, "lastName"},
		{"not UTF-8", contact.Fields{Email: "a@b.io", FirstName: "Ad\xffa"}, contact.Fields{}, "firstName"},
		{"NUL in a phone number", contact.Fields{PhoneNumber: "+33612345678\x00"}, contact.Fields{}, "phoneNumber"},
	} {
		f := c.in
		err := f.Normalize()
		if c.wantField == "" {
			require.NoError(t, err, c.name)
			require.Equal(t, c.want, f, c.name)
			continue
		}
		var e *apperr.Error
		require.True(t, errors.As(err, &e), "%s: %v", c.name, err)
		require.Equal(t, apperr.Invalid, e.Code, c.name)
		require.Equal(t, c.wantField, e.Field, c.name)
		require.True(t, strings.HasPrefix(e.Message, c.wantField+": "), c.name)
	}
}

type fixture struct {
	ctx        context.Context
	store      *db.Store
	orgA, orgB uuid.UUID
}

func setup(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	pool, err := db.Open(ctx, dbtest.New(t), 8, nil)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	f := &fixture{ctx: ctx, store: &db.Store{Pool: pool}}
	f.orgA, _, err = account.Bootstrap(ctx, f.store, "A", "pro")
	require.NoError(t, err)
	f.orgB, _, err = account.Bootstrap(ctx, f.store, "B", "pro")
	require.NoError(t, err)
	return f
}

// merge normalizes and merges f into org's contacts.
func (x *fixture) merge(t *testing.T, org uuid.UUID, f contact.Fields, prefer *uuid.UUID) uuid.UUID {
	t.Helper()
	require.NoError(t, f.Normalize())
	var id uuid.UUID
	require.NoError(t, x.store.TenantTx(x.ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
		var err error
		id, _, err = contact.Merge(x.ctx, tx, org, f, prefer)
		return err
	}))
	return id
}

func (x *fixture) get(t *testing.T, org, id uuid.UUID) dbq.Contact {
	t.Helper()
	var c dbq.Contact
	require.NoError(t, x.store.Tenant(x.ctx, org, func(q *dbq.Queries) error {
		var err error
		c, err = q.GetContact(x.ctx, dbq.GetContactParams{OrgID: org, ID: id})
		return err
	}))
	return c
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// What arrives about a person joins the contact it belongs to: by email,
// by the conversation's own contact, by phone number; nothing known is ever
// erased, and notes add up.
func TestMerge(t *testing.T) {
	t.Parallel()
	x := setup(t)

	ada := x.merge(t, x.orgA, contact.Fields{Email: "Ada@Example.com", FirstName: "Ada", Note: "wants a quote"}, nil)
	again := x.merge(t, x.orgA, contact.Fields{Email: "ada@example.com", LastName: "Lovelace", Note: "for 20 seats",
		CustomFields: []byte(`{"plan":"pro"}`)}, nil)
	require.Equal(t, ada, again, "the same email is the same contact")
	c := x.get(t, x.orgA, ada)
	require.Equal(t, "Ada", c.FirstName, "an empty name erases nothing")
	require.Equal(t, "Lovelace", c.LastName)
	require.Equal(t, "wants a quote\nfor 20 seats", c.Notes)
	require.JSONEq(t, `{"plan":"pro"}`, string(c.CustomFields))

	// The conversation's contact (with an email) takes a phone number.
	withPhone := x.merge(t, x.orgA, contact.Fields{PhoneNumber: "+44 20 7946 0958"}, &ada)
	require.Equal(t, ada, withPhone)
	require.Equal(t, "+442079460958", deref(x.get(t, x.orgA, ada).PhoneNumber))

	// A phone-only contact gets its email when one comes with its number.
	bob := x.merge(t, x.orgA, contact.Fields{PhoneNumber: "+33612345678", FirstName: "Bob"}, nil)
	require.Nil(t, x.get(t, x.orgA, bob).Email)
	require.Equal(t, bob, x.merge(t, x.orgA, contact.Fields{PhoneNumber: "+33612345678"}, nil), "the same number")
	require.Equal(t, bob, x.merge(t, x.orgA, contact.Fields{Email: "bob@example.com", PhoneNumber: "+33612345678"}, nil))
	require.Equal(t, "bob@example.com", deref(x.get(t, x.orgA, bob).Email))
	require.Equal(t, "Bob", x.get(t, x.orgA, bob).FirstName)

	// A phone-only conversation contact is not renumbered: another number
	// is another (or an existing) contact.
	carol := x.merge(t, x.orgA, contact.Fields{PhoneNumber: "+4915112345678"}, nil)
	other := x.merge(t, x.orgA, contact.Fields{PhoneNumber: "+4915187654321"}, &carol)
	require.NotEqual(t, carol, other)
	require.Equal(t, "+4915112345678", deref(x.get(t, x.orgA, carol).PhoneNumber))
	// ...but an email upgrades it.
	require.Equal(t, carol, x.merge(t, x.orgA, contact.Fields{Email: "carol@example.com"}, &carol))

	// Another email with Bob's number is another person.
	dan := x.merge(t, x.orgA, contact.Fields{Email: "dan@example.com", PhoneNumber: "+33612345678"}, nil)
	require.NotEqual(t, bob, dan)
	// An email contact does not take another email.
	eve := x.merge(t, x.orgA, contact.Fields{Email: "eve@example.com"}, &ada)
	require.NotEqual(t, ada, eve)
	require.Equal(t, "ada@example.com", deref(x.get(t, x.orgA, ada).Email))

	// SECURITY: another organization's same email is its own contact.
	inB := x.merge(t, x.orgB, contact.Fields{Email: "ada@example.com"}, nil)
	require.NotEqual(t, ada, inB)
	// ...and A's contact id, preferred from B, is not found there: B gets
	// a contact of its own, A's is untouched.
	fromB := x.merge(t, x.orgB, contact.Fields{PhoneNumber: "+15005550006"}, &ada)
	require.NotEqual(t, ada, fromB)
	require.Equal(t, "+442079460958", deref(x.get(t, x.orgA, ada).PhoneNumber))
}

// SECURITY: what an unverified caller says (a public agent's visitor, the
// model's lead_capture) fills what a contact lacks and changes nothing it
// holds: typing someone's email renames, renumbers or re-fields nobody, by
// that email or as the conversation's contact; what differs goes into the
// notes, and no note pushes older notes out.
func TestUnverifiedChangesNothingStored(t *testing.T) {
	t.Parallel()
	x := setup(t)
	ada := x.merge(t, x.orgA, contact.Fields{Email: "ada@example.com", FirstName: "Ada", PhoneNumber: "+442079460958",
		CustomFields: []byte(`{"plan":"pro"}`), Note: "customer since 2020"}, nil)

	claim := contact.Fields{Email: "ada@example.com", FirstName: "Mallory", LastName: "Lovelace", PhoneNumber: "+15005550006",
		CustomFields: []byte(`{"plan":"free","seats":3}`), Note: "call me", Unverified: true}
	require.Equal(t, ada, x.merge(t, x.orgA, claim, nil), "the same email is the same contact")
	c := x.get(t, x.orgA, ada)
	require.Equal(t, "Ada", c.FirstName, "a stored name is kept")
	require.Equal(t, "Lovelace", c.LastName, "a missing name is filled")
	require.Equal(t, "+442079460958", deref(c.PhoneNumber), "a stored number is kept")
	require.JSONEq(t, `{"plan":"pro","seats":3}`, string(c.CustomFields), "stored fields kept, new ones added")
	require.Equal(t, "customer since 2020\ncall me\nAlso said, not applied (the contact holds its own): "+
		`phone number +15005550006, first name Mallory, custom field "plan".`, c.Notes)

	// As the conversation's own contact, the same.
	require.Equal(t, ada, x.merge(t, x.orgA, contact.Fields{PhoneNumber: "+15005550006", FirstName: "Eve", Unverified: true}, &ada))
	c = x.get(t, x.orgA, ada)
	require.Equal(t, "+442079460958", deref(c.PhoneNumber))
	require.Equal(t, "Ada", c.FirstName)

	// A verified caller (the organization's key) updates what it says.
	x.merge(t, x.orgA, contact.Fields{Email: "ada@example.com", FirstName: "Augusta", PhoneNumber: "+15005550006"}, nil)
	c = x.get(t, x.orgA, ada)
	require.Equal(t, "Augusta", c.FirstName)
	require.Equal(t, "+15005550006", deref(c.PhoneNumber))

	// Notes near their bound: an unverified note is not added, a verified
	// one pushes the oldest out.
	long := strings.Repeat("n", 990)
	bea := x.merge(t, x.orgA, contact.Fields{Email: "bea@example.com", Note: "first"}, nil)
	for i := range 10 {
		// Each note its own: one the notes hold already is not added again.
		x.merge(t, x.orgA, contact.Fields{Email: "bea@example.com", Note: string(rune('a'+i)) + long[1:]}, nil)
	}
	before := x.get(t, x.orgA, bea).Notes
	require.True(t, strings.HasPrefix(before, "first\n"), "the setup's notes fit")
	x.merge(t, x.orgA, contact.Fields{Email: "bea@example.com", Note: strings.Repeat("x", 200), Unverified: true}, nil)
	require.Equal(t, before, x.get(t, x.orgA, bea).Notes)
	verified := strings.Repeat("v", 200)
	x.merge(t, x.orgA, contact.Fields{Email: "bea@example.com", Note: verified}, nil)
	after := x.get(t, x.orgA, bea).Notes
	require.True(t, strings.HasSuffix(after, "\n"+verified))
	require.False(t, strings.HasPrefix(after, "first"))

	// Unverified additions take at most half of a contact's room: notes up
	// to 5,000 characters, custom fields up to 16 KiB of JSON.
	cy := x.merge(t, x.orgA, contact.Fields{Email: "cy@example.com", Note: strings.Repeat("c", 990),
		CustomFields: []byte(`{"a":"` + strings.Repeat("a", 8000) + `"}`)}, nil)
	for i := range 4 {
		x.merge(t, x.orgA, contact.Fields{Email: "cy@example.com", Note: string(rune('d'+i)) + strings.Repeat("c", 998)}, nil)
	}
	x.merge(t, x.orgA, contact.Fields{Email: "cy@example.com", Note: "0123456789", Unverified: true,
		CustomFields: []byte(`{"b":"` + strings.Repeat("b", 9000) + `"}`)}, nil)
	c = x.get(t, x.orgA, cy)
	require.Len(t, c.Notes, 4990)
	require.NotContains(t, string(c.CustomFields), `"b"`)
	x.merge(t, x.orgA, contact.Fields{Email: "cy@example.com", Note: "ok", Unverified: true,
		CustomFields: []byte(`{"b":"small"}`)}, nil)
	c = x.get(t, x.orgA, cy)
	require.True(t, strings.HasSuffix(c.Notes, "\nok"))
	require.Contains(t, string(c.CustomFields), `"b": "small"`)

	// An unverified email does not claim a phone-only contact (which the
	// real owner of the number would then no longer reach): with its
	// number, it is a new contact.
	dee := x.merge(t, x.orgA, contact.Fields{PhoneNumber: "+4915112345678", FirstName: "Dee"}, nil)
	claimed := x.merge(t, x.orgA, contact.Fields{Email: "mallory@example.com", PhoneNumber: "+4915112345678", Unverified: true}, nil)
	require.NotEqual(t, dee, claimed)
	require.Nil(t, x.get(t, x.orgA, dee).Email)
	require.NotEqual(t, dee, x.merge(t, x.orgA, contact.Fields{Email: "eve@example.com", Unverified: true}, &dee),
		"nor as the conversation's contact")
	require.Nil(t, x.get(t, x.orgA, dee).Email)
}

// Requests creating one new contact at once all end with the same one, and
// exactly one of them reports creating it (lead.created is sent once).
func TestMergeConcurrent(t *testing.T) {
	t.Parallel()
	x := setup(t)
	ids := make([]uuid.UUID, 6)
	created := make([]bool, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			f := contact.Fields{Email: "race@example.com", FirstName: "R"}
			if i%2 == 1 {
				f = contact.Fields{PhoneNumber: "+12025550123"}
			}
			errs[i] = x.store.TenantTx(x.ctx, x.orgA, func(tx pgx.Tx, _ *dbq.Queries) error {
				var err error
				ids[i], created[i], err = contact.Merge(x.ctx, tx, x.orgA, f, nil)
				return err
			})
		})
	}
	wg.Wait()
	for i := range ids {
		require.NoError(t, errs[i])
		require.Equal(t, ids[i%2], ids[i])
	}
	require.NotEqual(t, ids[0], ids[1])
	n := 0
	for _, c := range created {
		if c {
			n++
		}
	}
	require.Equal(t, 2, n, "each of the two contacts is created once")
}

// A request giving an email to a phone-only contact while another creates
// a contact with that email (committed after the first looked for it) ends
// with the email's contact, not with the unique index's refusal (a 500
// once); the phone-only contact keeps no email.
func TestMergeEmailTakenMeanwhile(t *testing.T) {
	t.Parallel()
	x := setup(t)
	phoneOnly := x.merge(t, x.orgA, contact.Fields{PhoneNumber: "+12025550199"}, nil)

	// The first transaction creates grace@ and holds its commit.
	created, release := make(chan uuid.UUID, 1), make(chan struct{})
	var released sync.Once
	commit := func() { released.Do(func() { close(release) }) }
	t.Cleanup(commit) // a failed test lets the transaction end too
	first := make(chan error, 1)
	go func() {
		first <- x.store.TenantTx(x.ctx, x.orgA, func(tx pgx.Tx, _ *dbq.Queries) error {
			id, isNew, err := contact.Merge(x.ctx, tx, x.orgA, contact.Fields{Email: "grace@example.com", FirstName: "Grace"}, nil)
			if err != nil {
				close(created)
				return err
			}
			if !isNew {
				return errors.New("grace@ existed before")
			}
			created <- id
			<-release
			return nil
		})
	}()
	grace, ok := <-created
	if !ok {
		t.Fatal(<-first)
	}

	// The second finds no grace@ (not committed), takes the phone-only
	// contact and waits on the email's index entry until the first commits.
	var got uuid.UUID
	second := make(chan error, 1)
	go func() {
		second <- x.store.TenantTx(x.ctx, x.orgA, func(tx pgx.Tx, _ *dbq.Queries) error {
			var err error
			got, _, err = contact.Merge(x.ctx, tx, x.orgA, contact.Fields{Email: "grace@example.com", PhoneNumber: "+12025550199", LastName: "Hopper"}, nil)
			return err
		})
	}()
	dbtest.WaitForLockWait(t, x.store.Pool, "UPDATE contacts") // the second merge waits on the first
	commit()
	require.NoError(t, <-first)
	require.NoError(t, <-second)

	require.Equal(t, grace, got, "the email's contact")
	c := x.get(t, x.orgA, grace)
	require.Equal(t, "Grace", c.FirstName)
	require.Equal(t, "Hopper", c.LastName)
	require.Nil(t, x.get(t, x.orgA, phoneOnly).Email)
}

// Two requests giving a phone-only contact two different emails at once
// (each found it by its number before the other committed): the first
// gives it its email, and the second, which waited on the row, makes a new
// contact with its own, as it would have had it looked after the commit.
// It used to write its email over the first's: that email was kept
// nowhere, its contact and conversations now another person's.
func TestMergeEmailGivenMeanwhile(t *testing.T) {
	t.Parallel()
	x := setup(t)
	const number = "+12025550177"
	phoneOnly := x.merge(t, x.orgA, contact.Fields{PhoneNumber: number}, nil)

	// The first gives it ann@ and holds its commit.
	merged, release := make(chan uuid.UUID, 1), make(chan struct{})
	var released sync.Once
	commit := func() { released.Do(func() { close(release) }) }
	t.Cleanup(commit)
	first := make(chan error, 1)
	go func() {
		first <- x.store.TenantTx(x.ctx, x.orgA, func(tx pgx.Tx, _ *dbq.Queries) error {
			id, _, err := contact.Merge(x.ctx, tx, x.orgA, contact.Fields{Email: "ann@example.com", PhoneNumber: number, FirstName: "Ann"}, nil)
			if err != nil {
				close(merged)
				return err
			}
			merged <- id
			<-release
			return nil
		})
	}()
	ann, ok := <-merged
	if !ok {
		t.Fatal(<-first)
	}
	require.Equal(t, phoneOnly, ann)

	// The second finds the same phone-only contact and waits on its row.
	var got uuid.UUID
	var created bool
	second := make(chan error, 1)
	go func() {
		second <- x.store.TenantTx(x.ctx, x.orgA, func(tx pgx.Tx, _ *dbq.Queries) error {
			var err error
			got, created, err = contact.Merge(x.ctx, tx, x.orgA, contact.Fields{Email: "bob@example.com", PhoneNumber: number, FirstName: "Bob"}, nil)
			return err
		})
	}()
	dbtest.WaitForLockWait(t, x.store.Pool, "UPDATE contacts")
	commit()
	require.NoError(t, <-first)
	require.NoError(t, <-second)

	a := x.get(t, x.orgA, ann)
	require.Equal(t, "ann@example.com", deref(a.Email), "the first's email stays")
	require.Equal(t, "Ann", a.FirstName)
	require.NotEqual(t, ann, got)
	require.True(t, created, "bob@ is a new contact")
	b := x.get(t, x.orgA, got)
	require.Equal(t, "bob@example.com", deref(b.Email))
	require.Equal(t, "Bob", b.FirstName)
	require.Equal(t, number, deref(b.PhoneNumber))
}

// A request's custom fields are bounded (MaxCustomFields), and so is what
// a contact keeps of them all (MaxStoredCustomFields): new keys request
// after request used to grow one stored value without end, through a
// public agent without a key. Past either bound the request is Invalid,
// naming contact.customFields, and the contact keeps what it had.
func TestCustomFieldsAreBounded(t *testing.T) {
	t.Parallel()
	fields := func(key string, size int) *structpb.Struct {
		return &structpb.Struct{Fields: map[string]*structpb.Value{key: structpb.NewStringValue(strings.Repeat("x", size))}}
	}
	_, _, err := contact.FromRequest(&parleyv1.Contact{Email: "a@example.com", CustomFields: fields("k", contact.MaxCustomFields)})
	var e *apperr.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, apperr.Invalid, e.Code)
	require.Equal(t, "contact.customFields", e.Field)

	x := setup(t)
	merge := func(key string) error {
		f, ok, err := contact.FromRequest(&parleyv1.Contact{Email: "a@example.com", CustomFields: fields(key, contact.MaxCustomFields-100)})
		require.NoError(t, err)
		require.True(t, ok)
		return x.store.TenantTx(x.ctx, x.orgA, func(tx pgx.Tx, _ *dbq.Queries) error {
			_, _, err := contact.Merge(x.ctx, tx, x.orgA, f, nil)
			return err
		})
	}
	require.NoError(t, merge("a"))
	require.NoError(t, merge("b"))
	require.NoError(t, merge("a")) // the same keys again: no growth
	err = merge("c")
	require.ErrorAs(t, err, &e)
	require.Equal(t, apperr.Invalid, e.Code, "%v", err)
	require.Equal(t, "contact.customFields", e.Field)

	var stored []byte
	require.NoError(t, x.store.Tenant(x.ctx, x.orgA, func(q *dbq.Queries) error {
		c, err := q.ContactByEmail(x.ctx, dbq.ContactByEmailParams{OrgID: x.orgA, Email: ptrTo("a@example.com")})
		stored = c.CustomFields
		return err
	}))
	var kept map[string]string
	require.NoError(t, json.Unmarshal(stored, &kept))
	require.ElementsMatch(t, []string{"a", "b"}, slices.Collect(maps.Keys(kept)))
}

func ptrTo(s string) *string { return &s }

// A contact deleted while a merge is about to update it (found before the
// deletion committed, updated after): the merge makes the contact anew, as
// the same details given after a deletion do, not a 500. The email-giving
// merge (a phone-only contact, through its savepoint) likewise.
func TestMergeIntoAContactDeletedMeanwhile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		stored, f contact.Fields
	}{
		{"by email", contact.Fields{Email: "gone@example.com"}, contact.Fields{Email: "gone@example.com", FirstName: "G"}},
		{"giving an email", contact.Fields{PhoneNumber: "+12025550199"}, contact.Fields{Email: "new@example.com", PhoneNumber: "+12025550199"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			x := setup(t)
			old := x.merge(t, x.orgA, c.stored, nil)
			// The deletion holds the row, not yet committed.
			del, err := x.store.Pool.Begin(x.ctx)
			require.NoError(t, err)
			defer del.Rollback(x.ctx) //nolint:errcheck
			_, err = del.Exec(x.ctx, "SELECT set_config('app.org_id', $1, true)", x.orgA.String())
			require.NoError(t, err)
			_, err = dbq.New(del).DeleteContact(x.ctx, dbq.DeleteContactParams{OrgID: x.orgA, ID: old})
			require.NoError(t, err)

			type result struct {
				id      uuid.UUID
				created bool
				err     error
			}
			done := make(chan result, 1)
			go func() {
				f := c.f
				if err := f.Normalize(); err != nil {
					done <- result{err: err}
					return
				}
				var r result
				r.err = x.store.TenantTx(x.ctx, x.orgA, func(tx pgx.Tx, _ *dbq.Queries) error {
					var err error
					r.id, r.created, err = contact.Merge(x.ctx, tx, x.orgA, f, nil)
					return err
				})
				done <- r
			}()
			// The merge found the contact and waits on its row.
			require.Eventually(t, func() bool {
				var waiting int
				err := x.store.Pool.QueryRow(x.ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting)
				return err == nil && waiting > 0
			}, 10*time.Second, 10*time.Millisecond)
			require.NoError(t, del.Commit(x.ctx))
			r := <-done
			require.NoError(t, r.err)
			require.True(t, r.created, "made anew")
			require.NotEqual(t, old, r.id)
			require.Equal(t, deref(optional(c.f.Email)), deref(x.get(t, x.orgA, r.id).Email))
		})
	}
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
