package operator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/operator"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/usage"
)

// world is two organizations, an operator in A, a plain owner in A and an
// owner in B, and a chat turn in B.
type world struct {
	pool            *pgxpool.Pool
	store           *db.Store
	members         *member.Service
	a, b            uuid.UUID
	op, plain, bOwn *member.Member
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	pool, _ := dbtest.NewPool(t)
	w := &world{pool: pool, store: &db.Store{Pool: pool}}
	w.members = &member.Service{Store: w.store}
	var err error
	w.a, _, err = account.Bootstrap(ctx, w.store, "A", plan.Pro)
	require.NoError(t, err)
	w.b, _, err = account.Bootstrap(ctx, w.store, "B", plan.Enterprise)
	require.NoError(t, err)
	_, err = w.members.CreateOwner(ctx, w.a, "op@a.example")
	require.NoError(t, err)
	w.op, err = w.members.SetOperator(ctx, "op@a.example", true)
	require.NoError(t, err)
	w.plain, err = w.members.CreateOwner(ctx, w.a, "plain@a.example")
	require.NoError(t, err)
	w.bOwn, err = w.members.CreateOwner(ctx, w.b, "owner@b.example")
	require.NoError(t, err)
	w.tenantExec(t, w.b,
		`INSERT INTO agents (org_id, id, name, instructions, model, temperature) VALUES ($1, $2, 'x', 'y', 'gpt-4o', 0.5)`,
		w.b, uuid.New())
	w.tenantExec(t, w.b, `INSERT INTO conversations (org_id, id, agent_id) SELECT $1, 'c1', id FROM agents WHERE org_id = $1`, w.b)
	w.tenantExec(t, w.b, `INSERT INTO messages (org_id, id, conversation_id, role, content) VALUES ($1, $2, 'c1', 'assistant', 'hi')`, w.b, uuid.New())
	return w
}

func (w *world) tenantExec(t *testing.T, org uuid.UUID, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", org.String()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql, args...)
		return err
	}))
}

// counted are the tables the policies open to operators, and some they do not.
var counted = []string{"organizations", "members", "api_keys", "messages", "operators", "operator_audit", "agents", "conversations", "member_links"}

// counts returns how many rows of each table a transaction with these
// settings sees.
func counts(t *testing.T, pool *pgxpool.Pool, settings map[string]string) map[string]int {
	t.Helper()
	ctx := context.Background()
	out := map[string]int{}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for k, v := range settings {
			if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, v); err != nil {
				return err
			}
		}
		for _, table := range counted {
			var n int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
				return err
			}
			out[table] = n
		}
		return nil
	}))
	return out
}

// TestOperatorPolicies checks the operator_* policies themselves, with SQL
// that asks for everything: an operator reads across organizations what the
// admin page counts, a non-operator naming itself gains nothing, and tenant
// transactions are as isolated as before.
func TestOperatorPolicies(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()

	op := counts(t, w.pool, map[string]string{"app.operator_id": w.op.ID.String()})
	require.Equal(t, 2, op["organizations"])
	require.Equal(t, 3, op["members"])
	require.Equal(t, 2, op["api_keys"])
	require.Equal(t, 1, op["messages"])
	require.Equal(t, 1, op["operators"], "an operator sees its own operators row only")
	for _, table := range []string{"agents", "conversations", "member_links"} {
		require.Zero(t, op[table], "operators read %s across organizations", table)
	}

	// SECURITY: a member who is not an operator, a made-up id, and no one.
	for name, id := range map[string]string{"non-operator": w.plain.ID.String(), "B's owner": w.bOwn.ID.String(),
		"unknown id": uuid.NewString(), "empty": ""} {
		n := counts(t, w.pool, map[string]string{"app.operator_id": id})
		for table, c := range n {
			require.Zero(t, c, "%s sees %d rows of %s", name, c, table)
		}
	}

	// Tenants see their own organization only, operator policies or not.
	for org, want := range map[uuid.UUID]map[string]int{
		w.a: {"organizations": 1, "members": 2, "api_keys": 1, "messages": 0, "operators": 1, "operator_audit": 0},
		w.b: {"organizations": 1, "members": 1, "api_keys": 1, "messages": 1, "operators": 0, "operator_audit": 0},
	} {
		got := counts(t, w.pool, map[string]string{"app.org_id": org.String()})
		for table, n := range want {
			require.Equal(t, n, got[table], "%s of %s", table, org)
		}
	}
	// Writes: a non-operator changes no plan, no organization, writes no audit.
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT set_config('app.operator_id', $1, true)", w.plain.ID.String())
		require.NoError(t, err)
		tag, err := tx.Exec(ctx, "UPDATE plans SET requests_per_minute = 1")
		require.NoError(t, err)
		require.Zero(t, tag.RowsAffected(), "a non-operator changed plans")
		tag, err = tx.Exec(ctx, "UPDATE organizations SET plan = 'free'")
		require.NoError(t, err)
		require.Zero(t, tag.RowsAffected(), "a non-operator changed organizations")
		_, err = tx.Exec(ctx, `INSERT INTO operator_audit (id, operator_id, operator_email, action, target) VALUES ($1, $2, 'x', 'y', 'z')`,
			uuid.New(), w.plain.ID)
		return err
	})
	requireRLSViolation(t, err)
	// Nor does a tenant: plans are the operators' now.
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", w.a.String())
		require.NoError(t, err)
		tag, err := tx.Exec(ctx, "UPDATE plans SET requests_per_minute = 1")
		require.NoError(t, err)
		require.Zero(t, tag.RowsAffected(), "a tenant changed plans")
		return nil
	})
	require.NoError(t, err)
	// An operator writes audit rows in its own name only, and changes no
	// member or key directly.
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT set_config('app.operator_id', $1, true)", w.op.ID.String())
		require.NoError(t, err)
		for _, sql := range []string{"UPDATE members SET role = 'viewer'", "UPDATE api_keys SET plan = 'free'", "DELETE FROM messages"} {
			tag, err := tx.Exec(ctx, sql)
			require.NoError(t, err)
			require.Zero(t, tag.RowsAffected(), sql)
		}
		_, err = tx.Exec(ctx, `INSERT INTO operator_audit (id, operator_id, operator_email, action, target) VALUES ($1, $2, 'x', 'y', 'z')`,
			uuid.New(), w.plain.ID)
		return err
	})
	requireRLSViolation(t, err)

	// The operators table follows the flag: a tenant cannot add a member of
	// its own who is not flagged, nor one of another organization.
	for org, mem := range map[uuid.UUID]*member.Member{w.a: w.plain, w.b: w.plain} {
		err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", org.String())
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "INSERT INTO operators (org_id, member_id) VALUES ($1, $2)", mem.OrgID, mem.ID)
			return err
		})
		requireRLSViolation(t, err)
	}
	// The flag off: the operator sees nothing at once. On again, then the
	// member removed: gone with the member.
	_, err = w.members.SetOperator(ctx, w.op.Email, false)
	require.NoError(t, err)
	require.Zero(t, counts(t, w.pool, map[string]string{"app.operator_id": w.op.ID.String()})["organizations"])
	_, err = w.members.SetOperator(ctx, w.op.Email, true)
	require.NoError(t, err)
	require.Equal(t, 2, counts(t, w.pool, map[string]string{"app.operator_id": w.op.ID.String()})["organizations"])
	_, err = w.members.Remove(ctx, &member.Member{OrgID: w.a, Role: member.Owner}, w.op.ID)
	require.NoError(t, err)
	require.Zero(t, counts(t, w.pool, map[string]string{"app.operator_id": w.op.ID.String()})["organizations"])
	require.Zero(t, counts(t, w.pool, map[string]string{"app.org_id": w.a.String()})["operators"])
}

func requireRLSViolation(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42501", pgErr.Code, "want a row-level security violation: %v", err)
}

func TestService(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	s := &operator.Service{Store: w.store}

	ov, err := s.Overview(ctx, w.op)
	require.NoError(t, err)
	require.Len(t, ov.Orgs, 2)
	require.Equal(t, "B", ov.Orgs[1].Name)
	require.Equal(t, int64(1), ov.Orgs[1].Turns)
	require.Equal(t, int64(1), ov.Orgs[1].Members)
	require.Equal(t, int64(1), ov.Orgs[1].Keys)
	require.Len(t, ov.Plans, 4)
	require.Empty(t, ov.Audit)

	// SECURITY: the flag in Go is not enough: a forged one is refused by the
	// database's check, as is no flag.
	forged := *w.plain
	forged.Operator = true
	for _, m := range []*member.Member{w.plain, &forged, nil} {
		_, err := s.Overview(ctx, m)
		require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
		_, err = s.SetOrgPlan(ctx, m, w.b, plan.Free)
		require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
		err = s.SetPlanLimits(ctx, m, plan.Free, plan.Limits{PerMinute: 1, PerDay: 1})
		require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
		err = s.SetPlanKnowledge(ctx, m, plan.Free, 1)
		require.Equal(t, apperr.NotFound, apperr.CodeOf(err))
	}
	for _, bad := range []int64{0, -1, 1_000_000_000_001} {
		require.Equal(t, apperr.Invalid, apperr.CodeOf(s.SetPlanKnowledge(ctx, w.op, plan.Free, bad)), bad)
	}
	require.Equal(t, apperr.NotFound, apperr.CodeOf(s.SetPlanKnowledge(ctx, w.op, "platinum", 5)))

	// B (enterprise, custom limits, an enterprise key) goes down to starter:
	// its key comes down too, the custom limits go, the audit says so.
	require.NoError(t, account.SetLimits(ctx, w.store, w.b, plan.Limits{PerMinute: 7, PerDay: 70}))
	require.ErrorContains(t, account.SetLimits(ctx, w.store, w.b, plan.Limits{PerMinute: 70, PerDay: 7}), "per day must be at least")
	ch, err := s.SetOrgPlan(ctx, w.op, w.b, plan.Starter)
	require.NoError(t, err)
	require.Equal(t, plan.Enterprise, ch.From)
	require.Len(t, ch.Lowered, 1)
	require.Equal(t, plan.Enterprise, ch.Lowered[0].From)
	require.NoError(t, w.store.Tenant(ctx, w.b, func(q *dbq.Queries) error {
		keys, err := q.ListAPIKeys(ctx, w.b)
		require.NoError(t, err)
		require.Equal(t, plan.Starter, keys[0].Plan)
		// The update itself refuses an organization no longer on
		// enterprise (SetLimits racing the plan's change).
		pm := int32(9)
		_, err = q.SetOrganizationLimits(ctx, dbq.SetOrganizationLimitsParams{ID: w.b, RequestsPerMinute: &pm, RequestsPerDay: &pm})
		require.ErrorIs(t, err, pgx.ErrNoRows)
		org, err := q.GetOrganization(ctx, w.b)
		require.NoError(t, err)
		require.Equal(t, plan.Starter, org.Plan)
		require.Nil(t, org.CustomRequestsPerMinute)
		require.Equal(t, int32(60), org.RequestsPerMinute)
		return nil
	}))
	// Raising lowers nothing; the same plan again changes nothing.
	ch, err = s.SetOrgPlan(ctx, w.op, w.b, plan.Pro)
	require.NoError(t, err)
	require.Empty(t, ch.Lowered)
	_, err = s.SetOrgPlan(ctx, w.op, w.b, plan.Pro)
	require.NoError(t, err)
	_, err = s.SetOrgPlan(ctx, w.op, w.b, "platinum")
	require.Equal(t, apperr.Invalid, apperr.CodeOf(err))
	_, err = s.SetOrgPlan(ctx, w.op, uuid.New(), plan.Pro)
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err))

	// Plan limits: checked, then set and audited.
	for _, bad := range []plan.Limits{{PerMinute: 0, PerDay: 5}, {PerMinute: 5, PerDay: -1}, {PerMinute: 10, PerDay: 5}, {PerMinute: 1 << 31, PerDay: 1 << 32}} {
		err := s.SetPlanLimits(ctx, w.op, plan.Free, bad)
		require.Equal(t, apperr.Invalid, apperr.CodeOf(err), "%+v", bad)
	}
	require.Equal(t, apperr.NotFound, apperr.CodeOf(s.SetPlanLimits(ctx, w.op, "platinum", plan.Limits{PerMinute: 1, PerDay: 1})))
	require.NoError(t, s.SetPlanLimits(ctx, w.op, plan.Free, plan.Limits{PerMinute: 3, PerDay: 30}))

	ov, err = s.Overview(ctx, w.op)
	require.NoError(t, err)
	require.Equal(t, plan.Limits{PerMinute: 3, PerDay: 30}, ov.Plans[0].Limits)
	require.Len(t, ov.Audit, 3)
	last := ov.Audit[0]
	require.Equal(t, operator.ActionPlanLimits, last.Action)
	require.Equal(t, "free", last.Target)
	require.Equal(t, w.op.Email, last.OperatorEmail)
	first := ov.Audit[2]
	require.Equal(t, operator.ActionOrgPlan, first.Action)
	require.Equal(t, w.b.String(), first.Target)
	var detail struct {
		From, To    string
		KeysLowered []operator.LoweredKey `json:"keys_lowered"`
		Cleared     map[string]int        `json:"custom_limits_cleared"`
	}
	require.NoError(t, json.Unmarshal([]byte(first.Detail), &detail))
	require.Equal(t, "enterprise", detail.From)
	require.Equal(t, "starter", detail.To)
	require.Len(t, detail.KeysLowered, 1)
	require.Equal(t, map[string]int{"per_minute": 7, "per_day": 70}, detail.Cleared)
}

// TestDowngradeKeepsAndTells: an organization moved below what it holds
// keeps its knowledge and is told so, and leaving enterprise says which own
// limits went, in the change and in the audit: nothing goes silently.
func TestDowngradeKeepsAndTells(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	s := &operator.Service{Store: w.store}
	store, source := uuid.New(), uuid.New()
	w.tenantExec(t, w.b, `INSERT INTO datastores (org_id, id, name, embedding_model, embedding_dim) VALUES ($1, $2, 'kb', 'm', 3)`, w.b, store)
	w.tenantExec(t, w.b, `INSERT INTO datasources (org_id, id, datastore_id, type, name, status, chunk_count)
		VALUES ($1, $2, $3, 'text', 'big', 'synced', 30000)`, w.b, source, store)
	require.NoError(t, account.SetLimits(ctx, w.store, w.b, plan.Limits{PerMinute: 7, PerDay: 70}))

	ch, err := s.SetOrgPlan(ctx, w.op, w.b, plan.Free)
	require.NoError(t, err)
	require.Equal(t, int64(30000), ch.Chunks)
	require.Equal(t, int64(25000), ch.MaxChunks)
	require.NotNil(t, ch.Cleared)
	require.Equal(t, int32(7), *ch.Cleared.PerMinute)
	require.Equal(t, int32(70), *ch.Cleared.PerDay)
	require.NoError(t, w.store.Tenant(ctx, w.b, func(q *dbq.Queries) error {
		d, err := q.GetDatasource(ctx, dbq.GetDatasourceParams{OrgID: w.b, ID: source})
		require.NoError(t, err, "the downgrade deleted knowledge")
		require.Equal(t, int32(30000), d.ChunkCount)
		return nil
	}))
	ov, err := s.Overview(ctx, w.op)
	require.NoError(t, err)
	var detail struct {
		Over    map[string]int64 `json:"knowledge_over_quota"`
		Cleared map[string]int   `json:"custom_limits_cleared"`
	}
	require.NoError(t, json.Unmarshal([]byte(ov.Audit[0].Detail), &detail))
	require.Equal(t, map[string]int64{"chunks": 30000, "knowledge_chunks": 25000}, detail.Over)
	require.Equal(t, map[string]int{"per_minute": 7, "per_day": 70}, detail.Cleared)

	// Back up to a plan that holds it all: nothing over, nothing cleared.
	ch, err = s.SetOrgPlan(ctx, w.op, w.b, plan.Starter)
	require.NoError(t, err)
	require.Nil(t, ch.Cleared)
	require.Equal(t, int64(250000), ch.MaxChunks)
}

// TestMigrationKeepsEarlierOperators: operators flagged before 00006 are
// operators after it, and 00006 goes down and up again.
func TestMigrationKeepsEarlierOperators(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u := dbtest.NewEmpty(t)
	p := dbtest.Migrations(t, u)
	_, err := p.UpTo(ctx, 5)
	require.NoError(t, err)
	pool, err := db.Open(ctx, u, 2, nil)
	require.NoError(t, err)
	defer pool.Close()
	// The organization and its member are written as the schema of 00005
	// holds them (today's queries name columns that later migrations add).
	org, opID := uuid.New(), uuid.New()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.org_id', $1, true)", org.String()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO organizations (id, name, plan) VALUES ($1, 'Old', $2)", org, plan.Free); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO members (org_id, id, email, role, operator) VALUES ($1, $2, 'old-op@example.com', 'owner', true)", org, opID)
		return err
	}))
	op := struct{ ID uuid.UUID }{opID}

	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, counts(t, pool, map[string]string{"app.operator_id": op.ID.String()})["organizations"])
	_, err = p.DownTo(ctx, 5)
	require.NoError(t, err)
	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, counts(t, pool, map[string]string{"app.operator_id": op.ID.String()})["organizations"])
}

// TestTurnsOutliveDeletedConversations: an organization that deletes its
// conversations does not take its month's turns off the operator's page,
// as it does not off its own overview (usage_deleted, migration 00024).
func TestTurnsOutliveDeletedConversations(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	s := &operator.Service{Store: w.store}

	w.tenantExec(t, w.b, `DELETE FROM conversations WHERE org_id = $1 AND id = 'c1'`, w.b)
	rep, err := usage.Of(ctx, w.store, w.b, time.Now())
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Month.Turns)
	ov, err := s.Overview(ctx, w.op)
	require.NoError(t, err)
	require.Equal(t, "B", ov.Orgs[1].Name)
	if got, want := ov.Orgs[1].Turns, rep.Month.Turns; got != want {
		t.Fatalf("B's turns this month on the operator's page: got %d, want %d (its own overview's)", got, want)
	}
}
