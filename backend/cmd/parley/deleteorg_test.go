package main

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/jobs"
	"github.com/parleyhq/parley/backend/knowledge"
	"github.com/parleyhq/parley/backend/testenv"
)

// seedOrg gives org rows in every kind of table that holds an
// organization's data, and River jobs naming it; member is its operator
// member.
func seedOrg(t *testing.T, e *testenv.Env, jc *jobs.Client, org uuid.UUID, tag string) (member uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	member = uuid.New()
	agent, contact, store, source, form, hook, delivery := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	conv := "conv_" + tag
	require.NoError(t, e.App.Store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
		// The operator flag is the command line's to set (migration 00026).
		if _, err := tx.Exec(ctx, "SELECT set_config('app.command_line', 'on', true)"); err != nil {
			return err
		}
		for _, s := range []struct {
			sql  string
			args []any
		}{
			{`INSERT INTO members (org_id, id, email, role, operator) VALUES ($1, $2, $3, 'owner', true)`, []any{org, member, tag + "@example.com"}},
			{`INSERT INTO member_links (org_id, token_hash, purpose, email, role, expires_at)
			  VALUES ($1, sha256($2::bytea), 'invite', $3, 'viewer', now() + interval '1 day')`, []any{org, []byte(tag), "invitee-" + tag + "@example.com"}},
			{`INSERT INTO agents (org_id, id, name, instructions, model, temperature) VALUES ($1, $2, 'a', 'i', 'm', 0.5)`, []any{org, agent}},
			{`INSERT INTO contacts (org_id, id, email) VALUES ($1, $2, $3)`, []any{org, contact, "c-" + tag + "@example.com"}},
			{`INSERT INTO conversations (org_id, id, agent_id, contact_id) VALUES ($1, $2, $3, $4)`, []any{org, conv, agent, contact}},
			{`INSERT INTO conversations (org_id, id, agent_id) VALUES ($1, $2 || '_2', $3)`, []any{org, conv, agent}},
			{`INSERT INTO messages (org_id, id, conversation_id, role, content) VALUES ($1, gen_random_uuid(), $2, 'user', 'hi')`, []any{org, conv}},
			{`INSERT INTO messages (org_id, id, conversation_id, role, content, prompt_tokens, completion_tokens, cost)
			  VALUES ($1, gen_random_uuid(), $2, 'assistant', 'hello', 10, 5, 0.01)`, []any{org, conv}},
			{`INSERT INTO messages (org_id, id, conversation_id, role, content) VALUES ($1, gen_random_uuid(), $2 || '_2', 'user', 'hi')`, []any{org, conv}},
			{`INSERT INTO conversation_follows (org_id, conversation_id, until) VALUES ($1, $2, now() + interval '1 hour')`, []any{org, conv}},
			{`INSERT INTO usage_deleted (org_id, day, agent_id, turns) VALUES ($1, current_date, $2, 3)`, []any{org, agent}},
			{`INSERT INTO datastores (org_id, id, name, embedding_model, embedding_dim) VALUES ($1, $2, 'd', 'm', 3)`, []any{org, store}},
			{`INSERT INTO agent_datastores (org_id, agent_id, datastore_id) VALUES ($1, $2, $3)`, []any{org, agent, store}},
			{`INSERT INTO datasources (org_id, id, datastore_id, type, name, chunk_count) VALUES ($1, $2, $3, 'text', 's', 2)`, []any{org, source, store}},
			{`INSERT INTO datasources (org_id, id, datastore_id, type, name) VALUES ($1, gen_random_uuid(), $2, 'text', 'empty')`, []any{org, store}},
			{`INSERT INTO chunks (org_id, id, datastore_id, datasource_id, generation, position, text, tokens, embedding, embedding_dim, tsv, visible)
			  SELECT $1, gen_random_uuid(), $2, $3, 0, p, 'words of text ' || p, 3, '[1,0,0]', 3, to_tsvector('english', 'words of text'), false FROM generate_series(1, 2) p`, []any{org, store, source}},
			// Published as ingestion publishes them: the text index follows.
			{`UPDATE chunks SET visible = true WHERE org_id = $1 AND datasource_id = $2`, []any{org, source}},
			{`INSERT INTO forms (org_id, id, name) VALUES ($1, $2, 'f')`, []any{org, form}},
			{`INSERT INTO form_submissions (org_id, id, form_id, data) VALUES ($1, gen_random_uuid(), $2, '{}')`, []any{org, form}},
			{`INSERT INTO webhooks (org_id, id, url, events, secret) VALUES ($1, $2, 'https://example.com/h', '{form.submitted}', '\x00')`, []any{org, hook}},
			{`INSERT INTO webhook_deliveries (org_id, id, webhook_id, event_id, event_type, body) VALUES ($1, $2, $3, 'e', 'form.submitted', '\x7b7d')`, []any{org, delivery, hook}},
			{`INSERT INTO webhook_attempts (org_id, delivery_id, attempt, status_code) VALUES ($1, $2, 1, 500)`, []any{org, delivery}},
		} {
			if _, err := tx.Exec(ctx, s.sql, s.args...); err != nil {
				return err
			}
		}
		if err := jc.EnqueueIngest(ctx, tx, knowledge.IngestJob{OrgID: org, DatasourceID: source}); err != nil {
			return err
		}
		if err := jc.EnqueueDelivery(ctx, tx, org, delivery); err != nil {
			return err
		}
		return jc.EnqueueForget(ctx, tx, knowledge.ForgetJob{OrgID: org, DatasourceIDs: []uuid.UUID{source}})
	}))
	return member
}

// orgTables are the public schema's tables with an org_id column, read
// from the catalog: a table added later is counted without a change here.
func orgTables(t *testing.T, e *testenv.Env) []string {
	t.Helper()
	rows, err := e.App.Pool.Query(context.Background(), `SELECT c.table_name FROM information_schema.columns c
		JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE c.table_schema = 'public' AND c.column_name = 'org_id' AND t.table_type = 'BASE TABLE' ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, tables, "messages")
	return tables
}

// counts is org's rows in each table (read in org's own scope, as row
// security wants), and its River jobs under "river_job".
func counts(t *testing.T, e *testenv.Env, org uuid.UUID, tables []string) map[string]int {
	t.Helper()
	ctx := context.Background()
	out := map[string]int{}
	require.NoError(t, e.App.Store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
		for _, table := range tables {
			var n int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()+" WHERE org_id = $1", org).Scan(&n); err != nil {
				return err
			}
			out[table] = n
		}
		return nil
	}))
	var n int
	require.NoError(t, e.App.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'org_id' = $1`, org.String()).Scan(&n))
	out["river_job"] = n
	return out
}

// `parley admin delete-org` deletes one organization's rows in every table
// that has an org_id, and its River jobs, and none of another's; with a
// wrong --confirm it deletes nothing; interrupted, it is finished by
// running it again; it records the deletion in operator_audit.
func TestDeleteOrgDeletesEverythingOfItsOrganizationOnly(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	jc, err := jobs.New(e.App.Pool, nil, jobs.Config{})
	require.NoError(t, err)
	seedOrg(t, e, jc, e.A.ID, "a")
	operatorB := seedOrg(t, e, jc, e.B.ID, "b")
	tables := orgTables(t, e)
	beforeA, beforeB := counts(t, e, e.A.ID, tables), counts(t, e, e.B.ID, tables)
	for table, n := range beforeA {
		require.Positive(t, n, "the seed leaves %s empty: give it a row, so that its deletion is tested", table)
	}
	// A running job of A's is River's to end (it finds its rows gone),
	// never deleted under it.
	var running int64
	require.NoError(t, e.App.Pool.QueryRow(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()
		WHERE id = (SELECT min(id) FROM river_job WHERE args->>'org_id' = $1) RETURNING id`, e.A.ID.String()).Scan(&running))

	del := func(confirm string, extra ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"admin", "delete-org", "--database-url", e.DBURL, "--org", e.A.ID.String(), "--confirm", confirm}, extra...), &out, &errOut)
		return out.String(), err
	}
	for _, wrong := range []string{"Org a", "Org A ", "Org B"} {
		_, err := del(wrong)
		require.ErrorContains(t, err, "--confirm")
	}
	err = run(ctx, []string{"admin", "delete-org", "--database-url", e.DBURL, "--org", uuid.NewString(), "--confirm", "Org A"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorContains(t, err, "no organization")
	require.Equal(t, beforeA, counts(t, e, e.A.ID, tables), "a refused deletion deleted nothing")

	// Interrupted after its first batch of messages (one row a batch).
	ictx, interrupt := context.WithCancel(ctx)
	d := &account.Deleter{Store: e.App.Store, Jobs: jc, Batch: 1, Progress: func(what string, n int64) {
		if what == "messages" {
			interrupt()
		}
	}}
	_, err = d.DeleteOrg(ictx, e.A.ID, "Org A")
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
	mid := counts(t, e, e.A.ID, tables)
	require.NoError(t, e.App.Store.Tenant(ctx, e.A.ID, func(q *dbq.Queries) error {
		_, err := q.GetOrganization(ctx, e.A.ID)
		return err
	}), "the organization's row stays until the end")
	require.Zero(t, mid["api_keys"], "its keys went first")
	require.Less(t, mid["messages"], beforeA["messages"])

	out, err := del("Org A", "--batch", "1")
	require.NoError(t, err)
	require.Contains(t, out, "organization "+e.A.ID.String())
	require.Regexp(t, `(?m)^  chunks +2$`, out)

	after := counts(t, e, e.A.ID, tables)
	for table, n := range after {
		want := 0
		if table == "river_job" {
			want = 1 // the running one
		}
		require.Equal(t, want, n, "%s rows of the deleted organization are left", table)
	}
	var state string
	require.NoError(t, e.App.Pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, running).Scan(&state))
	require.Equal(t, "running", state)
	require.Equal(t, beforeB, counts(t, e, e.B.ID, tables), "the other organization's rows and jobs are untouched")

	// The deletion is in the operators' audit log, read by B's operator.
	require.NoError(t, e.App.Store.Operator(ctx, operatorB, func(q *dbq.Queries) error {
		rows, err := q.ListOperatorAudit(ctx, 10)
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, account.ActionOrgDeleted, rows[0].Action)
		require.Equal(t, e.A.ID.String(), rows[0].Target)
		require.Equal(t, account.CommandLine, rows[0].OperatorEmail)
		require.Contains(t, string(rows[0].Detail), `"Org A"`)
		return nil
	}))

	// Done: a third run finds no organization.
	_, err = del("Org A")
	require.ErrorContains(t, err, "no organization")
}

// A deletion's transaction takes at most its batch of datasources, synced
// or not: one not synced yet (pending, failed, or mid-ingestion) counts no
// chunk, and an organization's thousands of them, each with its file,
// went in one transaction, however small --batch.
func TestDeleteOrgBatchesDatasourcesWithoutChunks(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	jc, err := jobs.New(e.App.Pool, nil, jobs.Config{})
	require.NoError(t, err)
	require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		store := uuid.New()
		if _, err := tx.Exec(ctx, `INSERT INTO datastores (org_id, id, name, embedding_model, embedding_dim) VALUES ($1, $2, 'd', 'm', 3)`, e.A.ID, store); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO datasources (org_id, id, datastore_id, type, name, content)
			SELECT $1, gen_random_uuid(), $2, 'text', 'pending ' || n, 'a file' FROM generate_series(1, 5) n`, e.A.ID, store)
		return err
	}))

	var batches []int64
	d := &account.Deleter{Store: e.App.Store, Jobs: jc, Batch: 2, Progress: func(what string, n int64) {
		if what == "datasources" {
			batches = append(batches, n)
		}
	}}
	deleted, err := d.DeleteOrg(ctx, e.A.ID, "Org A")
	require.NoError(t, err)
	require.Equal(t, int64(5), deleted.Map()["datasources"])
	require.Equal(t, []int64{2, 2, 1}, batches, "datasources deleted a transaction")
}

// A deletion ends while the organization's published forms and public
// agents are still written to (they are, until its last step): a step
// ends with a batch that finds less than a batch, and what visitors
// wrote after it goes with the organization's row. It waited for a
// batch that found none, and a visitor's write between every two
// batches kept it deleting for as long as they wrote.
func TestDeleteOrgEndsWhileVisitorsWrite(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx := context.Background()
	jc, err := jobs.New(e.App.Pool, nil, jobs.Config{})
	require.NoError(t, err)
	form := uuid.New()
	submit := func(n int) {
		require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
			_, err := tx.Exec(ctx, `INSERT INTO form_submissions (org_id, id, form_id, data) SELECT $1, gen_random_uuid(), $2, '{}' FROM generate_series(1, $3::int)`, e.A.ID, form, n)
			return err
		}))
	}
	require.NoError(t, e.App.Store.TenantTx(ctx, e.A.ID, func(tx pgx.Tx, _ *dbq.Queries) error {
		_, err := tx.Exec(ctx, `INSERT INTO forms (org_id, id, name) VALUES ($1, $2, 'f')`, e.A.ID, form)
		return err
	}))
	submit(3)

	// A visitor submits the form again after each batch; past 20 batches
	// the deletion is taken as endless and stopped.
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	batches := 0
	d := &account.Deleter{Store: e.App.Store, Jobs: jc, Batch: 2, Progress: func(what string, n int64) {
		if what != "form submissions" {
			return
		}
		if batches++; batches > 20 {
			stop()
			return
		}
		submit(1)
	}}
	_, err = d.DeleteOrg(dctx, e.A.ID, "Org A")
	require.NoError(t, err, "after %d batches of form submissions", batches)
	require.Equal(t, 3, batches, "batches of form submissions")
}
