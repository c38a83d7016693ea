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
	"github.com/parleyhq/parley/backend/dbtest"
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

// A form.submitted delivery replayed while its submission is deleted: the
// copy the replay makes goes with the submission, whichever starts first.
// The deletion deleted the deliveries it could see; a replay that had read
// one before (or while) it was deleted committed its copy, with the
// values, and it was sent again and kept until --webhook-retention ended.
func TestReplayRacesDeleteSubmission(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := e.Do("POST", "/api/webhooks", e.A.Key, map[string]any{"url": "https://203.0.113.7/hook", "events": []string{"form.submitted"}})
	require.Equal(t, 201, r.Status, "%s", r.Body)
	var hook struct{ ID string }
	r.JSON(t, &hook)
	c := client(e, e.A.Key)
	created, err := c.CreateForm(ctx, contactForm())
	require.NoError(t, err)
	form := created.GetForm().GetId()
	ok := values(t, map[string]any{"first_name": "Ada", "email": "ada@example.com", "consent": true})
	// submit returns a new submission and the id of its delivery.
	submit := func() (sub, delivery string) {
		s, err := c.SubmitForm(ctx, &parleyv1.SubmitFormRequest{FormId: form, Values: ok})
		require.NoError(t, err)
		require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
			return tx.QueryRow(ctx, `SELECT id::text FROM webhook_deliveries
				WHERE org_id = $1 AND convert_from(body, 'UTF8')::jsonb #>> '{data,id}' = $2`, e.A.ID, s.GetId()).Scan(&delivery)
		}))
		return s.GetId(), delivery
	}
	carrying := func(sub string) int {
		var n int
		require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries
				WHERE org_id = $1 AND convert_from(body, 'UTF8')::jsonb #>> '{data,id}' = $2`, e.A.ID, sub).Scan(&n)
		}))
		return n
	}
	begin := func() (pgx.Tx, *dbq.Queries) {
		tx, err := e.App.Pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		_, err = tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", e.A.ID.String())
		require.NoError(t, err)
		return tx, dbq.New(tx)
	}
	replay := func(delivery string) testenv.Response {
		return e.Do("POST", "/api/webhooks/"+hook.ID+"/deliveries/"+delivery+"/replay", e.A.Key, nil)
	}

	// The deletion under way (DeleteSubmission's statements, uncommitted),
	// the replay sent: it waits for the deletion, then finds the delivery
	// gone.
	sub, delivery := submit()
	tx, q := begin()
	n, err := q.DeleteSubmission(ctx, dbq.DeleteSubmissionParams{OrgID: e.A.ID, FormID: uuid.MustParse(form), ID: uuid.MustParse(sub)})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, q.LockWebhooksForForget(ctx, e.A.ID))
	n, err = q.DeleteSubmissionDeliveries(ctx, dbq.DeleteSubmissionDeliveriesParams{OrgID: e.A.ID, FormID: form, SubmissionID: &sub})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	done := make(chan testenv.Response, 1)
	go func() { done <- replay(delivery) }()
	got := lockWait(t, e, done) // or its answer, when it did not wait
	require.NoError(t, tx.Commit(ctx))
	if got.Status == 0 {
		got = <-done
	}
	require.Equal(t, 0, carrying(sub), "no copy outlives the deletion (replay: %d %s)", got.Status, got.Body)
	require.Equal(t, 404, got.Status, "%s", got.Body)

	// The replay under way (its statements, uncommitted), the submission
	// deleted: the deletion waits for the copy and deletes it too.
	sub, delivery = submit()
	tx, q = begin()
	_, err = q.KeyShareWebhook(ctx, dbq.KeyShareWebhookParams{OrgID: e.A.ID, ID: uuid.MustParse(hook.ID)})
	require.NoError(t, err)
	d, err := q.KeyShareWebhookDelivery(ctx, dbq.KeyShareWebhookDeliveryParams{OrgID: e.A.ID, ID: uuid.MustParse(delivery)})
	require.NoError(t, err)
	_, err = q.CreateWebhookDelivery(ctx, dbq.CreateWebhookDeliveryParams{
		OrgID: e.A.ID, ID: uuid.New(), WebhookID: d.WebhookID, EventID: d.EventID, EventType: d.EventType, Body: d.Body,
	})
	require.NoError(t, err)
	deleted := make(chan error, 1)
	go func() {
		_, err := c.DeleteSubmission(ctx, &parleyv1.DeleteSubmissionRequest{FormId: form, Id: sub})
		deleted <- err
	}()
	dbtest.WaitForLockWait(t, e.App.Pool, "")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-deleted)
	require.Equal(t, 0, carrying(sub), "the replay's copy went with the submission")
}

// lockWait waits up to 20 s until a statement of e's database waits for a
// lock, or until done is ready (its value is then returned).
func lockWait(t *testing.T, e *testenv.Env, done <-chan testenv.Response) testenv.Response {
	t.Helper()
	for range 2000 {
		select {
		case r := <-done:
			return r
		default:
		}
		var n int
		err := e.App.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		require.NoError(t, err)
		if n > 0 {
			return testenv.Response{}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no statement waits for a lock after 20 s")
	return testenv.Response{}
}
