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

func (e *explainer) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	panic("explainer: Exec")
}

func (e *explainer) Query(context.Context, string, ...any) (pgx.Rows, error) {
	panic("explainer: Query")
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
	pool, _ := dbtest.NewPool(t)
	ctx := context.Background()
	store := &db.Store{Pool: pool}
	org, _, err := account.Bootstrap(ctx, store, "A", "free")
	require.NoError(t, err)
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
		var plan string
		rollback := errors.New("rolled back") // nothing of the explained insert stays
		err := store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
			e := &explainer{tx: tx}
			_, _ = dbq.New(e).CreateQuestion(ctx, dbq.CreateQuestionParams{
				ID: uuid.New(), Content: "hello", Channel: "api", Attachments: []byte("[]"),
				OrgID: org, ConversationID: "c01234", AgentID: agent, AnyCaller: true,
			})
			plan = strings.Join(e.plan, "\n")
			if e.err != nil {
				return e.err
			}
			return rollback
		})
		require.ErrorIs(t, err, rollback)
		return plan
	}
	_, err = pool.Exec(ctx, "ANALYZE conversations")
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
	pool, _ := dbtest.NewPool(t)
	ctx := context.Background()
	store := &db.Store{Pool: pool}
	org, _, err := account.Bootstrap(ctx, store, "A", "free")
	require.NoError(t, err)
	require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
		for i := range 3000 {
			email, phone := fmt.Sprintf("c%d@example.com", i), fmt.Sprintf("+1555%07d", i)
			if _, err := q.InsertContact(ctx, dbq.InsertContactParams{OrgID: org, ID: uuid.New(), Email: &email, PhoneNumber: &phone, CustomFields: []byte("{}")}); err != nil {
				return err
			}
		}
		return nil
	}))
	_, err = pool.Exec(ctx, "ANALYZE contacts")
	require.NoError(t, err)
	var plan string
	require.NoError(t, store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
		e := &explainer{tx: tx}
		phone := "+15550001234"
		_, _ = dbq.New(e).ContactByPhone(ctx, dbq.ContactByPhoneParams{OrgID: org, PhoneNumber: &phone})
		plan = strings.Join(e.plan, "\n")
		return e.err
	}))
	require.Contains(t, plan, "contacts_org_phone_number", plan)
	require.Contains(t, plan, "rows=1 ", plan)
}
