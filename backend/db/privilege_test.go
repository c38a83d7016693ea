package db_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/plan"
)

// privileges is an organization on starter with its bootstrap key, an owner
// who is not an operator, an operator in another organization, and how
// the rows that hold their privileges read now.
type privileges struct {
	pool       *pgxpool.Pool
	store      *db.Store
	members    *member.Service
	org, opOrg uuid.UUID
	owner, op  *member.Member
	ownerKey   uuid.UUID // org's bootstrap key
}

func newPrivileges(t *testing.T) *privileges {
	t.Helper()
	ctx := context.Background()
	pool, _ := dbtest.NewPool(t)
	p := &privileges{pool: pool, store: &db.Store{Pool: pool}}
	p.members = &member.Service{Store: p.store}
	var err error
	p.org, _, err = account.Bootstrap(ctx, p.store, "Tenant", plan.Starter)
	require.NoError(t, err)
	p.opOrg, _, err = account.Bootstrap(ctx, p.store, "Platform", plan.Free)
	require.NoError(t, err)
	p.owner, err = p.members.CreateOwner(ctx, p.org, "owner@tenant.example")
	require.NoError(t, err)
	_, err = p.members.CreateOwner(ctx, p.opOrg, "op@platform.example")
	require.NoError(t, err)
	p.op, err = p.members.SetOperator(ctx, "op@platform.example", true)
	require.NoError(t, err)
	require.NoError(t, p.store.Tenant(ctx, p.org, func(q *dbq.Queries) error {
		keys, err := q.ListAPIKeys(ctx, p.org)
		if err == nil {
			require.Len(t, keys, 1)
			p.ownerKey = keys[0].ID
		}
		return err
	}))
	return p
}

// state is what the guarded columns hold, read as the command line (which
// sees the organization's rows) and as the operator.
type state struct {
	OwnerOperator           bool
	OrgPlan                 string
	CustomPerMin, CustomDay *int32
	KeyPlan                 string
	KeyOrg                  uuid.UUID
	OwnerOrg                uuid.UUID
	Orgs                    int
}

func (p *privileges) state(t *testing.T) state {
	t.Helper()
	ctx := context.Background()
	var s state
	require.NoError(t, pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.operator_id', $1, true)", p.op.ID.String()); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT operator, org_id FROM members WHERE id = $1", p.owner.ID).Scan(&s.OwnerOperator, &s.OwnerOrg); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT plan, custom_requests_per_minute, custom_requests_per_day FROM organizations WHERE id = $1", p.org).
			Scan(&s.OrgPlan, &s.CustomPerMin, &s.CustomDay); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT plan, org_id FROM api_keys WHERE id = $1", p.ownerKey).Scan(&s.KeyPlan, &s.KeyOrg); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT count(*) FROM organizations").Scan(&s.Orgs)
	}))
	return s
}

// as runs sql in a transaction with these settings, as any query of the
// server's would run in its scope.
func (p *privileges) as(settings [][2]string, sql string, args ...any) error {
	ctx := context.Background()
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		for _, s := range settings {
			if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", s[0], s[1]); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, sql, args...)
		return err
	})
}

func requireRefused(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, msgAndArgs...)
	require.Equal(t, "42501", pgErr.Code, msgAndArgs...)
}

// TestTenantCannotChangePrivileges: whatever a tenant's transaction runs,
// the database keeps what the platform grants as it was (migration 00026);
// Go's checks are not the only wall.
func TestTenantCannotChangePrivileges(t *testing.T) {
	t.Parallel()
	p := newPrivileges(t)
	ctx := context.Background()
	before := p.state(t)
	require.False(t, before.OwnerOperator)
	require.Equal(t, plan.Starter, before.OrgPlan)
	require.Equal(t, plan.Starter, before.KeyPlan)

	tenant := [][2]string{{"app.org_id", p.org.String()}}
	// A tenant naming a member who is not an operator (its own) gains nothing.
	forged := [][2]string{{"app.org_id", p.org.String()}, {"app.operator_id", p.owner.ID.String()}}
	hash := make([]byte, 32)
	hash[0] = 1
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"members.operator", "UPDATE members SET operator = true WHERE id = $1", []any{p.owner.ID}},
		{"a new member who is an operator", "INSERT INTO members (org_id, id, email, role, operator) VALUES ($1, $2, 'new@tenant.example', 'owner', true)",
			[]any{p.org, uuid.New()}},
		{"organizations.plan", "UPDATE organizations SET plan = 'enterprise' WHERE id = $1", []any{p.org}},
		{"organizations.plan, down", "UPDATE organizations SET plan = 'free' WHERE id = $1", []any{p.org}},
		{"organizations' limits", "UPDATE organizations SET custom_requests_per_minute = 1000000, custom_requests_per_day = 1000000 WHERE id = $1",
			[]any{p.org}},
		{"api_keys.plan, up", "UPDATE api_keys SET plan = 'enterprise' WHERE id = $1", []any{p.ownerKey}},
		{"api_keys.plan, within the organization's", "UPDATE api_keys SET plan = 'free' WHERE id = $1", []any{p.ownerKey}},
		{"a key above the organization's plan", `INSERT INTO api_keys (org_id, id, name, key_hash, display_prefix, plan, scopes)
			VALUES ($1, $2, 'k', $3, 'p', 'enterprise', '{chat}')`, []any{p.org, uuid.New(), hash}},
		// Row security's own WITH CHECK, already: no row moves to another organization.
		{"members.org_id", "UPDATE members SET org_id = $1 WHERE id = $2", []any{p.opOrg, p.owner.ID}},
		{"api_keys.org_id", "UPDATE api_keys SET org_id = $1 WHERE id = $2", []any{p.opOrg, p.ownerKey}},
	} {
		for _, scope := range [][][2]string{tenant, forged} {
			requireRefused(t, p.as(scope, c.sql, c.args...), "%s, scope %v", c.name, scope)
		}
	}
	// An organization is not made by a tenant's transaction, not even one
	// scoped to an organization that does not exist yet.
	fresh := uuid.New()
	requireRefused(t, p.as([][2]string{{"app.org_id", fresh.String()}},
		"INSERT INTO organizations (id, name, plan) VALUES ($1, 'Mine', 'enterprise')", fresh))

	// The server's own queries, in the server's own tenant transaction.
	requireRefused(t, p.store.Tenant(ctx, p.org, func(q *dbq.Queries) error {
		_, err := q.SetOperator(ctx, dbq.SetOperatorParams{OrgID: p.org, ID: p.owner.ID, Operator: true})
		return err
	}))
	requireRefused(t, p.store.Tenant(ctx, p.org, func(q *dbq.Queries) error {
		return q.OperatorSetOrganizationPlan(ctx, dbq.OperatorSetOrganizationPlanParams{ID: p.org, Plan: plan.Enterprise})
	}))
	ent, _, err := account.Bootstrap(ctx, p.store, "Enterprise", plan.Enterprise)
	require.NoError(t, err)
	requireRefused(t, p.store.Tenant(ctx, ent, func(q *dbq.Queries) error {
		n := int32(1_000_000)
		_, err := q.SetOrganizationLimits(ctx, dbq.SetOrganizationLimitsParams{ID: ent, RequestsPerMinute: &n, RequestsPerDay: &n})
		return err
	}))
	require.NoError(t, p.store.Tenant(ctx, ent, func(q *dbq.Queries) error {
		o, err := q.GetOrganization(ctx, ent)
		require.Nil(t, o.CustomRequestsPerMinute)
		return err
	}))
	requireRefused(t, p.store.Tenant(ctx, p.org, func(q *dbq.Queries) error {
		_, err := q.LowerAPIKeyPlans(ctx, dbq.LowerAPIKeyPlansParams{OrgID: p.org, Plan: plan.Free, Allowed: []string{plan.Free}})
		return err
	}))
	after := p.state(t)
	after.Orgs-- // Enterprise, made by the command line above
	require.Equal(t, before, after, "a refused change left something changed")
}

// TestPrivilegedPathsStillChangePrivileges: the command line (parley
// admin) and the operator's transactions still do what they are for.
func TestPrivilegedPathsStillChangePrivileges(t *testing.T) {
	t.Parallel()
	p := newPrivileges(t)
	ctx := context.Background()
	opScope := [][2]string{{"app.operator_id", p.op.ID.String()}}
	opAsOrg := [][2]string{{"app.operator_id", p.op.ID.String()}, {"app.org_id", p.org.String()}}

	// parley admin operator, on and off.
	m, err := p.members.SetOperator(ctx, p.owner.Email, true)
	require.NoError(t, err)
	require.True(t, m.Operator)
	require.True(t, p.state(t).OwnerOperator)
	_, err = p.members.SetOperator(ctx, p.owner.Email, false)
	require.NoError(t, err)
	require.False(t, p.state(t).OwnerOperator)
	// The flag is the command line's alone: an operator does not hand it out.
	requireRefused(t, p.as(opAsOrg, "UPDATE members SET operator = true WHERE id = $1", p.owner.ID))

	// The operator moves the organization's plan, up and down.
	require.NoError(t, p.as(opScope, "UPDATE organizations SET plan = 'enterprise' WHERE id = $1", p.org))
	require.Equal(t, plan.Enterprise, p.state(t).OrgPlan)
	// parley admin set-limits.
	require.NoError(t, account.SetLimits(ctx, p.store, p.org, plan.Limits{PerMinute: 5, PerDay: 50}))
	s := p.state(t)
	require.Equal(t, int32(5), *s.CustomPerMin)
	require.Equal(t, int32(50), *s.CustomDay)
	// The operator as the organization: its keys' plans, never above the
	// organization's; the limits cleared with the plan.
	require.NoError(t, p.as(opAsOrg, "UPDATE api_keys SET plan = 'enterprise' WHERE id = $1", p.ownerKey))
	require.NoError(t, p.as(opScope, `UPDATE organizations SET plan = 'pro', custom_requests_per_minute = NULL,
		custom_requests_per_day = NULL WHERE id = $1`, p.org))
	requireRefused(t, p.as(opAsOrg, "UPDATE api_keys SET plan = 'enterprise' WHERE id = $1", p.ownerKey),
		"a key above its organization's plan")
	require.NoError(t, p.as(opAsOrg, "UPDATE api_keys SET plan = 'pro' WHERE id = $1", p.ownerKey))
	s = p.state(t)
	require.Equal(t, plan.Pro, s.OrgPlan)
	require.Equal(t, plan.Pro, s.KeyPlan)
	require.Nil(t, s.CustomPerMin)

	// parley admin bootstrap and create-key.
	_, _, err = account.Bootstrap(ctx, p.store, "Third", plan.Enterprise)
	require.NoError(t, err)
	require.Equal(t, 3, p.state(t).Orgs)
	_, err = account.CreateKey(ctx, p.store, p.org, "cli", plan.Starter, []string{"chat"})
	require.NoError(t, err)
}

// TestPlanRankIsGos: the database's order of plans (parley_plan_rank,
// which keeps keys at or below their organization's plan) is backend/plan's.
func TestPlanRankIsGos(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	ctx := context.Background()
	plans := []string{plan.Free, plan.Starter, plan.Pro, plan.Enterprise, "platinum"}
	for _, a := range plans {
		for _, b := range plans {
			var atMost bool
			require.NoError(t, pool.QueryRow(ctx, "SELECT coalesce(parley_plan_rank($1) <= parley_plan_rank($2), false)", a, b).Scan(&atMost))
			require.Equal(t, plan.AtMost(a, b), atMost, "%s at most %s", a, b)
		}
	}
}

// TestCommandLineScopeIsTheCommandLines: the scope that lets a transaction
// set the platform's privileges, and list every organization
// (db.Store.CommandLine and CommandLineOrganizations, app.command_line), is
// set by the functions of `parley admin` only, and those are called by the
// command (backend/cmd/parley) only (and backend/testenv, which sets up
// tests' organizations as an operator would), never by the server's code.
func TestCommandLineScopeIsTheCommandLines(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	cli := map[string]bool{"account.Bootstrap": true, "account.SetLimits": true, "account.DeleteOrg": true, "member.SetOperator": true, "main.organizations": true}
	var setters, callers []string
	fset := token.NewFileSet()
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "third_party") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "backend/db/dbq" {
			return nil // the generated q.SetOperator, the query itself
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			at := f.Name.Name + "." + fn.Name.Name
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && strings.Contains(lit.Value, "app.command_line") {
					setters = append(setters, rel+": "+at+" names app.command_line")
				}
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch name := sel.Sel.Name; {
				case (name == "CommandLine" || name == "CommandLineOrganizations" || name == "CommandLineTx") && dir != "backend/db":
					if !cli[at] {
						setters = append(setters, rel+": "+at+" calls CommandLine")
					}
				case cli["account."+name] || cli["member."+name]:
					// Methods (member's SetOperator, account.Deleter's
					// DeleteOrg) are called on a value of any name.
					if x, ok := sel.X.(*ast.Ident); name == "SetOperator" || name == "DeleteOrg" || (ok && x.Name == "account") {
						if !slices.Contains([]string{"backend/cmd/parley", "backend/member", "backend/account", "backend/testenv"}, dir) {
							callers = append(callers, rel+": "+at+" calls "+name)
						}
					}
				}
				return true
			})
		}
		return nil
	}))
	slices.Sort(setters)
	require.Equal(t, []string{
		"backend/db/operator.go: db.CommandLineOrganizations names app.command_line",
		"backend/db/operator.go: db.CommandLineTx names app.command_line",
	}, setters)
	require.Empty(t, callers, "the command line's functions called outside backend/cmd/parley")
}
