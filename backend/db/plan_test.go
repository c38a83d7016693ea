package db_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
)

// explainer is a dbq.DBTX that runs each statement under EXPLAIN ANALYZE
// and keeps the plan, so that a test reads the plan of the generated
// query itself, with its own parameters. The caller's Scan gets no row.
type explainer struct {
	tx   pgx.Tx
	plan []string
	err  error
}

func (e *explainer) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	_ = e.QueryRow(ctx, sql, args...)
	return pgconn.CommandTag{}, e.err
}

// Query explains the statement and returns no rows.
func (e *explainer) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if _ = e.QueryRow(ctx, sql, args...); e.err != nil {
		return nil, e.err
	}
	return e.tx.Query(ctx, "SELECT 1 WHERE false")
}

func (e *explainer) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := e.tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+sql, args...)
	if err != nil {
		e.err = err
		return errRow{err}
	}
	for rows.Next() {
		var line string
		if e.err = rows.Scan(&line); e.err != nil {
			break
		}
		e.plan = append(e.plan, line)
	}
	rows.Close()
	if e.err == nil {
		e.err = rows.Err()
	}
	return errRow{pgx.ErrNoRows}
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// planOrg is a database of its own with one organization, whose plans a
// test reads.
func planOrg(t *testing.T) (*db.Store, uuid.UUID) {
	t.Helper()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	org, _, err := account.Bootstrap(context.Background(), store, "A", "free")
	require.NoError(t, err)
	return store, org
}

// explainIn returns the plan of the statement run(q) sends, executed
// (EXPLAIN ANALYZE) in a tenant transaction of org that is then rolled
// back: nothing of an explained write stays.
func explainIn(t *testing.T, store *db.Store, org uuid.UUID, run func(q *dbq.Queries)) string {
	t.Helper()
	var plan string
	rollback := errors.New("rolled back")
	err := store.TenantTx(context.Background(), org, func(tx pgx.Tx, _ *dbq.Queries) error {
		e := &explainer{tx: tx}
		run(dbq.New(e))
		plan = strings.Join(e.plan, "\n")
		if e.err != nil {
			return e.err
		}
		return rollback
	})
	require.ErrorIs(t, err, rollback)
	return plan
}

// A turn's question finds its conversation by the primary key once
// Postgres has statistics of the table. Before its first ANALYZE (a new
// deployment, until autovacuum analyzes the table, within a minute of its
// first 50 rows; and every `make load` run, until parley-load primed its
// fresh database) the planner knows nothing of the ids and chooses
// another index holding id, which reads the organization's every
// conversation: that run measured it (issue 13, docs/benchmarks.md). Every
// index on conversations ends in id for keyset paging, so no rewording of
// the query keeps them out of the planner's choice.
func TestCreateQuestionFindsItsConversationByKey(t *testing.T) {
	t.Parallel()
	store, org := planOrg(t)
	ctx := context.Background()
	agent := seedAgent(t, store, org)
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		for i := range 3000 {
			if _, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: org, ID: fmt.Sprintf("c%05d", i), AgentID: agent, Channel: "api"}); err != nil {
				return err
			}
		}
		return nil
	}))

	explain := func(t *testing.T) string {
		t.Helper()
		return explainIn(t, store, org, func(q *dbq.Queries) {
			_, _ = q.CreateQuestion(ctx, dbq.CreateQuestionParams{
				ID: uuid.New(), Content: "hello", Channel: "api", Attachments: []byte("[]"),
				OrgID: org, ConversationID: "c01234", AgentID: agent, AnyCaller: true,
			})
		})
	}
	_, err := store.Pool.Exec(ctx, "ANALYZE conversations")
	require.NoError(t, err)
	plan := explain(t)
	require.Contains(t, plan, "conversations_pkey", plan)
	require.NotContains(t, plan, "conversations_org_", plan)
}

// A contact is found by its phone number through an index, whether it has
// an email or not (contact.find, on chat turns that name a contact by
// phone, a public agent's visitors' too): contacts_org_phone holds only
// those without an email, and without another the lookup read every
// contact of the organization.
func TestContactByPhoneUsesAnIndex(t *testing.T) {
	t.Parallel()
	store, org := planOrg(t)
	ctx := context.Background()
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		for i := range 3000 {
			email, phone := fmt.Sprintf("c%d@example.com", i), fmt.Sprintf("+1555%07d", i)
			if _, err := q.InsertContact(ctx, dbq.InsertContactParams{OrgID: org, ID: uuid.New(), Email: &email, PhoneNumber: &phone, CustomFields: []byte("{}")}); err != nil {
				return err
			}
		}
		return nil
	}))
	_, err := store.Pool.Exec(ctx, "ANALYZE contacts")
	require.NoError(t, err)
	plan := explainIn(t, store, org, func(q *dbq.Queries) {
		phone := "+15550001234"
		_, _ = q.ContactByPhone(ctx, dbq.ContactByPhoneParams{OrgID: org, PhoneNumber: &phone})
	})
	require.Contains(t, plan, "contacts_org_phone_number", plan)
	require.Contains(t, plan, "rows=1 ", plan)
}

// A list read in a tenant transaction is planned for its own organization,
// and not compiled.
// pgx prepares each statement once per connection, and after five runs
// Postgres may keep a generic plan, made for no organization in
// particular: its estimates are those of an average one. Beside many small
// organizations the average is small, and the generic plan of a page of
// conversations or contacts read a large organization's every row: 0.26 s
// and more for a page of 200,000 conversations 300 days back, where the
// organization's own plan reads the page by index in 1 ms
// (docs/benchmarks.md, "Plans at volume").
func TestTenantListsArePlannedForTheirOrganization(t *testing.T) {
	t.Parallel()
	_, url := dbtest.NewPool(t)
	ctx := context.Background()
	pool, err := db.Open(ctx, url, 1, nil) // one connection: its prepared statements are the ones read
	require.NoError(t, err)
	defer pool.Close()
	store := &db.Store{Pool: pool}
	seed := func(name string, n int) uuid.UUID {
		org, _, err := account.Bootstrap(ctx, store, name, "free")
		require.NoError(t, err)
		agent := seedAgent(t, store, org)
		require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
			for i := range n {
				if _, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: org, ID: fmt.Sprintf("c%05d", i), AgentID: agent, Channel: "api"}); err != nil {
					return err
				}
			}
			return nil
		}))
		return org
	}
	big := seed("big", 3000)
	for i := range 40 {
		seed(fmt.Sprintf("small %d", i), 2)
	}
	_, err = store.Pool.Exec(ctx, "ANALYZE conversations")
	require.NoError(t, err)

	var generic, custom int64
	var jit string
	require.NoError(t, store.TenantTx(ctx, big, func(tx pgx.Tx, q *dbq.Queries) error {
		for range 10 {
			if _, err := q.SearchConversations(ctx, dbq.SearchConversationsParams{OrgID: big, MaxRows: 51}); err != nil {
				return err
			}
		}
		if err := tx.QueryRow(ctx, "SELECT current_setting('jit')").Scan(&jit); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
			WHERE statement LIKE '-- name: SearchConversations %'`).Scan(&generic, &custom)
	}))
	require.Zero(t, generic, "generic plans: %d, custom: %d", generic, custom)
	require.EqualValues(t, 10, custom)
	// Nor compiled: JIT starts on a large organization's statements (their
	// estimated cost), and compiling a contact's deletion took 0.6 s of
	// its 0.62.
	if got, want := jit, "off"; got != want {
		t.Errorf("jit in a tenant transaction: got %q, want %q", got, want)
	}
}

// An agent's stats read its conversations, not their messages: each
// conversation counts its own (message_count). Joined to the messages,
// they took 1.5 s for an agent of 100,000 conversations, on every read
// and write of the agent (docs/benchmarks.md, "Plans at volume").
func TestAgentStatsReadsNoMessages(t *testing.T) {
	t.Parallel()
	store, org := planOrg(t)
	ctx := context.Background()
	agent := seedAgent(t, store, org)
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		for i := range 3 {
			id := fmt.Sprintf("c%d", i)
			if _, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: org, ID: id, AgentID: agent, Channel: "api"}); err != nil {
				return err
			}
			for range i + 1 {
				if _, err := q.CreateHumanMessage(ctx, dbq.CreateHumanMessageParams{OrgID: org, ID: uuid.New(), ConversationID: id, Content: "hi", Channel: "api", Author: "a"}); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		st, err := q.AgentStats(ctx, dbq.AgentStatsParams{OrgID: org, AgentID: agent})
		require.NoError(t, err)
		if got, want := st.TotalConversations, int64(3); got != want {
			t.Errorf("conversations: got %d, want %d", got, want)
		}
		if got, want := st.TotalMessages, int64(6); got != want {
			t.Errorf("messages: got %d, want %d", got, want)
		}
		return nil
	}))
	plan := explainIn(t, store, org, func(q *dbq.Queries) {
		_, _ = q.AgentStats(ctx, dbq.AgentStatsParams{OrgID: org, AgentID: agent})
	})
	require.NotContains(t, plan, "messages", plan)
}

// The form.submitted deliveries of one submission are found by index
// (webhook_deliveries_form_submission), not by parsing the body of each of
// the organization's deliveries: about a second, twice, for each deleted
// submission at 500,000 deliveries (docs/benchmarks.md, "Plans at volume").
func TestSubmissionDeliveriesAreFoundByIndex(t *testing.T) {
	t.Parallel()
	store, org := planOrg(t)
	ctx := context.Background()
	form, hook, sub := uuid.New(), uuid.New(), uuid.New()
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		if _, err := q.CreateWebhook(ctx, dbq.CreateWebhookParams{OrgID: org, ID: hook, Url: "https://example.com/h", Events: []string{"form.submitted"}, Secret: []byte("s")}); err != nil {
			return err
		}
		for i := range 3000 {
			id := uuid.New()
			if i == 1234 {
				id = sub
			}
			body := fmt.Sprintf(`{"type":"form.submitted","timestamp":"2026-11-28T10:00:00.000Z","data":{"id":%q,"formId":%q,"data":{"email":"a%d@example.com"}}}`, id, form, i)
			if _, err := q.CreateWebhookDelivery(ctx, dbq.CreateWebhookDeliveryParams{OrgID: org, ID: uuid.New(), WebhookID: hook, EventID: fmt.Sprintf("msg_%d", i), EventType: "form.submitted", Body: []byte(body)}); err != nil {
				return err
			}
		}
		return nil
	}))
	_, err := store.Pool.Exec(ctx, "ANALYZE webhook_deliveries")
	require.NoError(t, err)
	sid := sub.String()
	plan := explainIn(t, store, org, func(q *dbq.Queries) {
		_, _ = q.DeleteSubmissionDeliveries(ctx, dbq.DeleteSubmissionDeliveriesParams{OrgID: org, FormID: form.String(), SubmissionID: &sid})
	})
	require.Contains(t, plan, "webhook_deliveries_form_submission", plan)
	require.Contains(t, plan, "rows=1 ", plan)
}

// The deliveries that carry one contact are found by index
// (webhook_deliveries_contact), as a submission's are, not by parsing the
// body of each of the organization's deliveries at each contact's deletion.
func TestContactDeliveriesAreFoundByIndex(t *testing.T) {
	t.Parallel()
	store, org := planOrg(t)
	ctx := context.Background()
	hook, contact := uuid.New(), uuid.New()
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		if _, err := q.CreateWebhook(ctx, dbq.CreateWebhookParams{OrgID: org, ID: hook, Url: "https://example.com/h", Events: []string{"lead.created"}, Secret: []byte("s")}); err != nil {
			return err
		}
		for i := range 3000 {
			id := uuid.New()
			if i == 1234 {
				id = contact
			}
			body := fmt.Sprintf(`{"type":"lead.created","timestamp":"2026-11-28T10:00:00.000Z","data":{"id":%q,"email":"a%d@example.com"}}`, id, i)
			if _, err := q.CreateWebhookDelivery(ctx, dbq.CreateWebhookDeliveryParams{OrgID: org, ID: uuid.New(), WebhookID: hook, EventID: fmt.Sprintf("msg_%d", i), EventType: "lead.created", Body: []byte(body)}); err != nil {
				return err
			}
		}
		return nil
	}))
	_, err := store.Pool.Exec(ctx, "ANALYZE webhook_deliveries")
	require.NoError(t, err)
	plan := explainIn(t, store, org, func(q *dbq.Queries) {
		_, _ = q.DeleteContactDeliveries(ctx, dbq.DeleteContactDeliveriesParams{OrgID: org, ContactID: contact.String()})
	})
	require.Contains(t, plan, "webhook_deliveries_contact", plan)
	require.Contains(t, plan, "rows=1 ", plan)
	plan = explainIn(t, store, org, func(q *dbq.Queries) {
		_, _ = q.UnlinkContactDeliveries(ctx, dbq.UnlinkContactDeliveriesParams{OrgID: org, ContactID: contact.String()})
	})
	require.Contains(t, plan, "webhook_deliveries_contact", plan)
	answer := []string{uuid.NewString()}
	plan = explainIn(t, store, org, func(q *dbq.Queries) {
		_, _ = q.ForgetDeliveredLeadCaptures(ctx, dbq.ForgetDeliveredLeadCapturesParams{OrgID: org, MessageIds: answer, Result: "forgotten"})
	})
	require.Contains(t, plan, "webhook_deliveries_lead_message", plan)
	email := "a1234@example.com"
	plan = explainIn(t, store, org, func(q *dbq.Queries) {
		_, _ = q.ForgetNamedLeadCaptureDeliveries(ctx, dbq.ForgetNamedLeadCaptureDeliveriesParams{OrgID: org, Result: "forgotten", Email: &email})
	})
	require.Contains(t, plan, "webhook_deliveries_lead_message", plan)
}

// A contact's deletion finds the answers whose lead_capture calls may have
// recorded it by an index of those answers (messages_org_lead_capture),
// not by reading every answer of the organization: 0.7 s at 1,000,000
// messages (docs/benchmarks.md, "Plans at volume").
func TestForgetLeadCapturesUsesAnIndex(t *testing.T) {
	t.Parallel()
	store, org := planOrg(t)
	ctx := context.Background()
	agent := seedAgent(t, store, org)
	contact := uuid.New()
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		email := "ada@example.com"
		if _, err := q.InsertContact(ctx, dbq.InsertContactParams{OrgID: org, ID: contact, Email: &email, CustomFields: []byte("{}")}); err != nil {
			return err
		}
		for i := range 300 {
			id := fmt.Sprintf("c%d", i)
			if _, err := q.CreateConversation(ctx, dbq.CreateConversationParams{OrgID: org, ID: id, AgentID: agent, Channel: "api"}); err != nil {
				return err
			}
			for j := range 10 {
				calls := []byte("[]")
				if i%50 == 0 && j == 1 {
					calls = []byte(`[{"id":"c1","name":"lead_capture","arguments":"{\"email\":\"ada@example.com\"}","result":"contact recorded: email ada@example.com"}]`)
				}
				if _, err := q.CreateMessage(ctx, dbq.CreateMessageParams{OrgID: org, ID: uuid.New(), ConversationID: id, Role: "assistant",
					Content: "answer", Channel: "api", Attachments: []byte("[]"), Sources: []byte("[]"), ToolCalls: calls}); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	_, err := store.Pool.Exec(ctx, "ANALYZE messages")
	require.NoError(t, err)
	plan := explainIn(t, store, org, func(q *dbq.Queries) {
		_, _ = q.ForgetContactLeadCaptures(ctx, dbq.ForgetContactLeadCapturesParams{OrgID: org, ContactID: contact, Result: "forgotten"})
	})
	require.Contains(t, plan, "using messages_org_lead_capture on messages", plan)
}

// Each batch of an organization's deletion (`parley admin delete-org`)
// fetches its rows by their place (a Tid Scan). Named by key, `(org_id,
// id) IN (a batch)`, they were joined to the whole table, every
// organization's rows read by a sequential scan for each batch: 0.1-0.2 s
// a batch at 200,000 to 500,000 rows, growing with the table
// (docs/benchmarks.md, "Deleting a large organization").
func TestOrgDeletionBatchesFetchTheirRowsByPlace(t *testing.T) {
	t.Parallel()
	store, org := planOrg(t)
	ctx := context.Background()
	agent := seedAgent(t, store, org)
	// 3,000 rows of each (the messages' trigger writes their events),
	// analyzed: on a table without statistics the planner may read the
	// organization's rows by index instead, which at this size is as good.
	hook, form := uuid.New(), uuid.New()
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		if _, err := q.CreateWebhook(ctx, dbq.CreateWebhookParams{OrgID: org, ID: hook, Url: "https://example.com/h", Events: []string{"form.submitted"}, Secret: []byte("s")}); err != nil {
			return err
		}
		_, err := q.CreateForm(ctx, dbq.CreateFormParams{OrgID: org, ID: form, Name: "f", Fields: []byte("[]")})
		return err
	}))
	require.NoError(t, store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
		for _, seed := range []struct {
			sql string
			id  any
		}{
			{`INSERT INTO conversations (org_id, id, agent_id, channel) SELECT $1, 'c' || i, $2, 'api' FROM generate_series(1, 3000) i`, agent},
			{`INSERT INTO messages (org_id, id, conversation_id, role, content) SELECT $1, gen_random_uuid(), 'c' || i, 'user', $2 FROM generate_series(1, 3000) i`, "hi"},
			{`INSERT INTO contacts (org_id, id, email) SELECT $1, gen_random_uuid(), i || $2 FROM generate_series(1, 3000) i`, "@example.com"},
			{`INSERT INTO webhook_deliveries (org_id, id, webhook_id, event_id, event_type, body)
			  SELECT $1, gen_random_uuid(), $2, 'evt_' || i, 'form.submitted', '{}' FROM generate_series(1, 3000) i`, hook},
			{`INSERT INTO webhook_attempts (org_id, delivery_id, attempt, status_code, duration_ms) SELECT $1, id, 1, 200, 1 FROM webhook_deliveries WHERE webhook_id = $2`, hook},
			{`INSERT INTO form_submissions (org_id, id, form_id, data) SELECT $1, gen_random_uuid(), $2, '{}' FROM generate_series(1, 3000) i`, form},
		} {
			if _, err := tx.Exec(ctx, seed.sql, org, seed.id); err != nil {
				return err
			}
		}
		return nil
	}))
	_, err := store.Pool.Exec(ctx, "ANALYZE conversations, messages, conversation_events, contacts, webhook_deliveries, webhook_attempts, form_submissions")
	require.NoError(t, err)
	for table, del := range map[string]func(q *dbq.Queries){
		"messages": func(q *dbq.Queries) {
			_, _ = q.DeleteOrgMessages(ctx, dbq.DeleteOrgMessagesParams{OrgID: org, BatchRows: 10})
		},
		"conversation_events": func(q *dbq.Queries) {
			_, _ = q.DeleteOrgConversationEvents(ctx, dbq.DeleteOrgConversationEventsParams{OrgID: org, BatchRows: 10})
		},
		"conversations": func(q *dbq.Queries) {
			_, _ = q.DeleteOrgConversations(ctx, dbq.DeleteOrgConversationsParams{OrgID: org, BatchRows: 10})
		},
		"webhook_attempts": func(q *dbq.Queries) {
			_, _ = q.DeleteOrgWebhookAttempts(ctx, dbq.DeleteOrgWebhookAttemptsParams{OrgID: org, BatchRows: 10})
		},
		"webhook_deliveries": func(q *dbq.Queries) {
			_, _ = q.DeleteOrgWebhookDeliveries(ctx, dbq.DeleteOrgWebhookDeliveriesParams{OrgID: org, BatchRows: 10})
		},
		"form_submissions": func(q *dbq.Queries) {
			_, _ = q.DeleteOrgFormSubmissions(ctx, dbq.DeleteOrgFormSubmissionsParams{OrgID: org, BatchRows: 10})
		},
		"contacts": func(q *dbq.Queries) {
			_, _ = q.DeleteOrgContacts(ctx, dbq.DeleteOrgContactsParams{OrgID: org, BatchRows: 10})
		},
	} {
		plan := explainIn(t, store, org, del)
		require.Contains(t, plan, "Tid Scan on "+table, plan)
	}
}

// The conversations' delete trigger keeps generic plans of its statements
// in a tenant transaction, which plans the transaction's own statements
// for their parameters (plan_cache_mode force_custom_plan): planned again
// for each row, it took 250 µs a conversation deleted, 1.2-1.7 s of each
// batch of 5,000 of an organization's deletion (docs/benchmarks.md,
// "Deleting a large organization"). Migration 00039 sets it on the
// function; a CREATE OR REPLACE of the function must keep it.
func TestConversationDeleteTriggerKeepsItsPlans(t *testing.T) {
	t.Parallel()
	store, _ := planOrg(t)
	var config []string
	require.NoError(t, store.Pool.QueryRow(context.Background(),
		`SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE oid = 'parley_keep_usage'::regproc`).Scan(&config))
	require.Contains(t, config, "plan_cache_mode=auto")
}
