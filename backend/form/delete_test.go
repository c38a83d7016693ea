package form_test

import (
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/form"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/testenv"
)

// A form deleted while submissions to it are being written: each
// submission is stored (and goes with the form) or refused with NotFound,
// never a 500, and no submission outlives its form.
func TestDeleteFormRacesSubmissions(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	org := e.Bootstrap("Racing forms", "enterprise")
	c := client(e, org.Key)
	ok := values(t, map[string]any{"first_name": "Ada", "email": "ada@example.com", "consent": true})
	for range 10 {
		created, err := c.CreateForm(ctx, contactForm())
		require.NoError(t, err)
		id := created.GetForm().GetId()
		var wg sync.WaitGroup
		errs := make([]error, 8)
		start := make(chan struct{})
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = c.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: id, Values: ok})
			}()
		}
		var delErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, delErr = c.DeleteForm(ctx, &parleyv1.DeleteFormRequest{Id: id})
		}()
		close(start)
		wg.Wait()
		require.NoError(t, delErr)
		for _, err := range errs {
			if err != nil {
				require.Equal(t, connect.CodeNotFound, code(err), "%v", err)
			}
		}
		var left int
		require.NoError(t, e.App.Store.TenantTx(ctx, org.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
			return tx.QueryRow(ctx, "SELECT count(*) FROM form_submissions WHERE org_id = $1 AND form_id = $2", org.ID, id).Scan(&left)
		}))
		require.Zero(t, left)
	}
}

// Deleting a form takes its submissions with it, however many: the delete
// is bounded as deleting an agent or a datastore is (db.DeleteTimeout),
// not by a request's transaction bound, which a form of many submissions
// outlived (503 every time: it could not be deleted). The bound is
// shortened here below what the delete of the submissions below takes.
func TestDeleteFormOfManySubmissionsIsNotCutShort(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	created, err := client(e, e.A.Key).CreateForm(ctx, contactForm())
	require.NoError(t, err)
	id := created.GetForm().GetId()
	require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		_, err := tx.Exec(ctx, `INSERT INTO form_submissions (org_id, id, form_id, data)
			SELECT $1, gen_random_uuid(), $2, '{"first_name":"Ada"}' FROM generate_series(1, 30000)`, e.A.ID, id)
		return err
	}))

	svc := &form.Service{Store: &db.Store{Pool: e.App.Store.Pool, Timeout: 20 * time.Millisecond}}
	actx := auth.WithPrincipal(ctx, &auth.Principal{OrgID: e.A.ID, KeyID: uuid.New(), Scopes: []string{"admin"}})
	_, err = svc.DeleteForm(actx, &parleyv1.DeleteFormRequest{Id: id})
	require.NoError(t, err)

	var left int
	require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		return tx.QueryRow(ctx, "SELECT count(*) FROM form_submissions WHERE org_id = $1", e.A.ID).Scan(&left)
	}))
	require.Zero(t, left)
}

// Deleting a submission deletes the form.submitted webhook deliveries
// that carried its values (pending here: no worker runs, so one is never
// sent), not those of the form's other submissions nor another
// organization's: they kept the values until --webhook-retention ended.
func TestDeleteSubmissionDeletesItsDeliveries(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ok := values(t, map[string]any{"first_name": "Ada", "email": "ada@example.com", "consent": true})
	submit := func(org testenv.Org) (form, sub1, sub2 string) {
		r := e.Do("POST", "/api/webhooks", org.Key, map[string]any{"url": "https://203.0.113.7/hook", "events": []string{"form.submitted"}})
		require.Equal(t, 201, r.Status, "%s", r.Body)
		c := client(e, org.Key)
		created, err := c.CreateForm(ctx, contactForm())
		require.NoError(t, err)
		form = created.GetForm().GetId()
		s1, err := c.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: form, Values: ok})
		require.NoError(t, err)
		s2, err := c.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: form, Values: ok})
		require.NoError(t, err)
		return form, s1.GetId(), s2.GetId()
	}
	delivered := func(org testenv.Org) []string {
		var ids []string
		require.NoError(t, e.App.Store.TenantTx(ctx, org.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
			rows, err := tx.Query(ctx, `SELECT convert_from(body, 'UTF8')::jsonb #>> '{data,id}' FROM webhook_deliveries
				WHERE org_id = $1 AND event_type = 'form.submitted' ORDER BY 1`, org.ID)
			if err != nil {
				return err
			}
			ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		}))
		return ids
	}
	form, gone, kept := submit(e.A)
	_, otherGone, otherKept := submit(e.B)
	require.ElementsMatch(t, []string{gone, kept}, delivered(e.A))

	_, err := client(e, e.A.Key).DeleteSubmission(ctx, &parleyv1.DeleteSubmissionRequest{FormId: form, Id: gone})
	require.NoError(t, err)
	require.Equal(t, []string{kept}, delivered(e.A))
	require.ElementsMatch(t, []string{otherGone, otherKept}, delivered(e.B))

	// Deleting the whole form deletes the rest: they held its values too.
	_, err = client(e, e.A.Key).DeleteForm(ctx, &parleyv1.DeleteFormRequest{Id: form})
	require.NoError(t, err)
	require.Empty(t, delivered(e.A))
	require.ElementsMatch(t, []string{otherGone, otherKept}, delivered(e.B))
}
