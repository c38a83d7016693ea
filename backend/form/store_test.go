package form_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
)

// The public_form policies: a transaction that names a form sees that form
// and its organization if the form is published, nothing else: no other
// form, no submission, no other organization.
func TestPublicFormPolicy(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	orgA, _, err := account.Bootstrap(ctx, store, "A", "free")
	require.NoError(t, err)
	orgB, _, err := account.Bootstrap(ctx, store, "B", "pro")
	require.NoError(t, err)

	mk := func(org uuid.UUID, published bool) uuid.UUID {
		id := uuid.Must(uuid.NewV7())
		require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
			if _, err := q.CreateForm(ctx, dbq.CreateFormParams{OrgID: org, ID: id, Name: "f", Fields: []byte("[]"), Published: published}); err != nil {
				return err
			}
			_, err := q.CreateSubmission(ctx, dbq.CreateSubmissionParams{OrgID: org, ID: uuid.Must(uuid.NewV7()), FormID: id, Data: []byte("{}")})
			return err
		}))
		return id
	}
	pub, draft, other := mk(orgA, true), mk(orgA, false), mk(orgB, true)

	count := func(q pgx.Tx, table string) int {
		var n int
		require.NoError(t, q.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
	look := func(id uuid.UUID) (row dbq.GetPublicFormRow, forms, subs, orgs int, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			q := dbq.New(tx)
			if err := q.SetPublicForm(ctx, id.String()); err != nil {
				return err
			}
			forms, subs, orgs = count(tx, "forms"), count(tx, "form_submissions"), count(tx, "organizations")
			row, err = q.GetPublicForm(ctx, id)
			return err
		})
		return
	}

	row, forms, subs, orgs, err := look(pub)
	require.NoError(t, err)
	require.Equal(t, orgA, row.OrgID)
	require.EqualValues(t, 10, row.OrgRequestsPerMinute, "the owner's plan (free)")
	require.Equal(t, []int{1, 0, 1}, []int{forms, subs, orgs})

	_, forms, subs, orgs, err = look(draft)
	require.True(t, errors.Is(err, pgx.ErrNoRows), "an unpublished form is not visible: %v", err)
	require.Equal(t, []int{0, 0, 0}, []int{forms, subs, orgs})

	row, _, _, _, err = look(other)
	require.NoError(t, err)
	require.Equal(t, orgB, row.OrgID)

	// Without naming a form (or a tenant), nothing at all.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		require.Equal(t, []int{0, 0, 0}, []int{count(tx, "forms"), count(tx, "form_submissions"), count(tx, "organizations")})
		return nil
	}))
	// A tenant sees its own forms and submissions only.
	require.NoError(t, store.TenantTx(ctx, orgB, func(tx pgx.Tx, _ *dbq.Queries) error {
		require.Equal(t, []int{1, 1}, []int{count(tx, "forms"), count(tx, "form_submissions")})
		return nil
	}))
}
