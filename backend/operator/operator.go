// Package operator is what platform operators (members with the operator
// flag, set by `parley admin operator`) do across organizations: list them
// with their usage, change an organization's plan, edit a plan's limits.
// Every change is written to operator_audit in the transaction that makes it.
//
// It must never act for anyone but an operator: each call checks the flag,
// and runs in a db.Store.Operator transaction, where the database checks it
// again (parley_is_operator) before any row of another organization shows.
package operator

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/plan"
)

// AuditRows is how many audit rows Overview returns, latest first.
const AuditRows = 50

// errNotOperator is every refusal of a non-operator: like a page that does
// not exist, it tells them nothing.
var errNotOperator = apperr.New(apperr.NotFound, "there is no such page")

// Service runs operators' reads and changes.
type Service struct {
	Store *db.Store
	Now   func() time.Time
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Org is an organization as operators see it.
type Org struct {
	ID        uuid.UUID
	Name      string
	Plan      string
	CreatedAt time.Time
	Members   int64
	// Keys counts keys not revoked.
	Keys int64
	// Turns counts chat turns (assistant messages) this month (UTC), those
	// of conversations deleted since included (as usage.Of counts them).
	Turns int64
}

// Plan is one plan of the catalog with its limits.
type Plan struct {
	Name   string
	Limits plan.Limits
	// KnowledgeChunks is how many chunks an organization's datastores may
	// hold (plans.knowledge_chunks).
	KnowledgeChunks int64
}

// Entry is one row of the audit.
type Entry struct {
	ID            uuid.UUID
	At            time.Time
	OperatorID    uuid.UUID
	OperatorEmail string
	Action        string
	Target        string
	// Detail is the change's details as JSON.
	Detail string
}

// Overview is the admin page's data.
type Overview struct {
	Orgs  []Org
	Plans []Plan
	Audit []Entry
	// Since is the start of the month Org.Turns counts.
	Since time.Time
}

// Audit actions.
const (
	ActionOrgPlan    = "organization.plan"
	ActionPlanLimits = "plan.limits"
	// ActionPlanKnowledge: a plan's knowledge quota, in chunks.
	ActionPlanKnowledge = "plan.knowledge"
)

// run checks that op is an operator, in Go and then in the database, and runs
// fn in op's operator transaction.
func (s *Service) run(ctx context.Context, op *member.Member, fn func(q *dbq.Queries) error) error {
	// SECURITY: only platform operators; anyone else is told nothing.
	if op == nil || !op.Operator {
		return errNotOperator
	}
	return s.Store.Operator(ctx, op.ID, func(q *dbq.Queries) error {
		// SECURITY: the database's own check (the flag as it is now, not as
		// the caller read it): the operator_* policies ask the same.
		ok, err := q.IsOperator(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errNotOperator
		}
		return fn(q)
	})
}

// Overview lists every organization with its counts, the plan catalog and
// the latest audit rows.
func (s *Service) Overview(ctx context.Context, op *member.Member) (*Overview, error) {
	now := s.now().UTC()
	out := &Overview{Since: time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)}
	err := s.run(ctx, op, func(q *dbq.Queries) error {
		orgs, err := q.OperatorOrganizations(ctx, out.Since)
		if err != nil {
			return err
		}
		for _, o := range orgs {
			out.Orgs = append(out.Orgs, Org{ID: o.ID, Name: o.Name, Plan: o.Plan, CreatedAt: o.CreatedAt,
				Members: o.Members, Keys: o.Keys, Turns: o.Turns})
		}
		plans, err := q.ListPlans(ctx)
		if err != nil {
			return err
		}
		for _, name := range catalog {
			for _, p := range plans {
				if p.ID == name {
					out.Plans = append(out.Plans, Plan{
						Name: name, Limits: plan.Limits{PerMinute: int64(p.RequestsPerMinute), PerDay: int64(p.RequestsPerDay)},
						KnowledgeChunks: p.KnowledgeChunks,
					})
				}
			}
		}
		audit, err := q.ListOperatorAudit(ctx, AuditRows)
		if err != nil {
			return err
		}
		for _, a := range audit {
			out.Audit = append(out.Audit, Entry{ID: a.ID, At: a.At, OperatorID: a.OperatorID, OperatorEmail: a.OperatorEmail,
				Action: a.Action, Target: a.Target, Detail: string(a.Detail)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LoweredKey is a key whose plan came down with its organization's.
type LoweredKey struct {
	ID   uuid.UUID `json:"id"`
	Name string    `json:"name"`
	From string    `json:"from"`
}

// PlanChange is what SetOrgPlan did.
type PlanChange struct {
	OrgName string
	From    string
	To      string
	// Lowered are the organization's keys whose plan was above To.
	Lowered []LoweredKey
	// Cleared are the organization's own limits (parley admin set-limits),
	// gone as it left enterprise; nil when it had none or stays.
	Cleared *ClearedLimits
	// Chunks is how many chunks its datastores hold, and MaxChunks how many
	// To allows: a plan below what it holds keeps its knowledge, but it adds
	// none until under.
	Chunks, MaxChunks int64
}

// ClearedLimits are an enterprise organization's own limits, either unset.
type ClearedLimits struct {
	PerMinute *int32 `json:"per_minute"`
	PerDay    *int32 `json:"per_day"`
}

// SetOrgPlan moves an organization to plan p. Its keys above p come down to
// p in the same transaction (a key's plan is never above its
// organization's), and the audit says which.
func (s *Service) SetOrgPlan(ctx context.Context, op *member.Member, orgID uuid.UUID, p string) (*PlanChange, error) {
	if !plan.Valid(p) {
		return nil, apperr.InvalidField("plan", "must be free, starter, pro or enterprise")
	}
	var ch *PlanChange
	err := s.run(ctx, op, func(q *dbq.Queries) error {
		org, err := q.OperatorLockOrganization(ctx, orgID)
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.New(apperr.NotFound, "organization %s not found", orgID)
		}
		if err != nil {
			return err
		}
		ch = &PlanChange{OrgName: org.Name, From: org.Plan, To: p, Lowered: []LoweredKey{}}
		if org.Plan == p {
			return nil
		}
		if err := q.OperatorSetOrganizationPlan(ctx, dbq.OperatorSetOrganizationPlanParams{ID: orgID, Plan: p}); err != nil {
			return err
		}
		// The keys are the organization's rows to change: the rest of this
		// transaction acts as the organization, under tenant_isolation.
		if err := q.SetTenant(ctx, orgID.String()); err != nil {
			return err
		}
		// SECURITY: per-plan issuance holds after the change: no key of the
		// organization stays above its plan.
		rows, err := q.LowerAPIKeyPlans(ctx, dbq.LowerAPIKeyPlansParams{OrgID: orgID, Plan: p, Allowed: upTo(p)})
		if err != nil {
			return err
		}
		for _, r := range rows {
			ch.Lowered = append(ch.Lowered, LoweredKey{ID: r.ID, Name: r.Name, From: r.OldPlan})
		}
		detail := map[string]any{"organization": org.Name, "from": org.Plan, "to": p, "keys_lowered": ch.Lowered}
		if p != plan.Enterprise && (org.CustomRequestsPerMinute != nil || org.CustomRequestsPerDay != nil) {
			ch.Cleared = &ClearedLimits{PerMinute: org.CustomRequestsPerMinute, PerDay: org.CustomRequestsPerDay}
			detail["custom_limits_cleared"] = ch.Cleared
		}
		// Knowledge above the new quota is kept, not deleted: the operator
		// is told, and the audit says so.
		now, err := q.GetOrganization(ctx, orgID)
		if err != nil {
			return err
		}
		ch.Chunks, ch.MaxChunks = now.Chunks, now.KnowledgeChunks
		if ch.Chunks > ch.MaxChunks {
			detail["knowledge_over_quota"] = map[string]int64{"chunks": ch.Chunks, "knowledge_chunks": ch.MaxChunks}
		}
		return audit(ctx, q, op, ActionOrgPlan, orgID.String(), detail)
	})
	if err != nil {
		return nil, err
	}
	return ch, nil
}

// maxLimit is the largest limit the plans table holds (int).
const maxLimit = 1<<31 - 1

// SetPlanLimits sets the standard limits of plan p (an enterprise
// organization's own limits, when set, still win for its keys).
func (s *Service) SetPlanLimits(ctx context.Context, op *member.Member, p string, lim plan.Limits) error {
	if !plan.Valid(p) {
		return apperr.New(apperr.NotFound, "there is no plan %q", p)
	}
	if lim.PerMinute <= 0 || lim.PerMinute > maxLimit {
		return apperr.InvalidField("per_minute", "must be a whole number from 1 to %d", maxLimit)
	}
	if lim.PerDay <= 0 || lim.PerDay > maxLimit {
		return apperr.InvalidField("per_day", "must be a whole number from 1 to %d", maxLimit)
	}
	if lim.PerDay < lim.PerMinute {
		return apperr.InvalidField("per_day", "must be at least the per-minute limit (%d)", lim.PerMinute)
	}
	return s.run(ctx, op, func(q *dbq.Queries) error {
		old, err := lockedPlan(ctx, q, p)
		if err != nil {
			return err
		}
		n, err := q.OperatorSetPlanLimits(ctx, dbq.OperatorSetPlanLimitsParams{ID: p,
			RequestsPerMinute: int32(lim.PerMinute), RequestsPerDay: int32(lim.PerDay)})
		if err != nil {
			return err
		}
		if n != 1 {
			return errors.New("operator: plan limits update changed no row")
		}
		return audit(ctx, q, op, ActionPlanLimits, p, map[string]any{
			"from": map[string]int32{"per_minute": old.RequestsPerMinute, "per_day": old.RequestsPerDay},
			"to":   map[string]int64{"per_minute": lim.PerMinute, "per_day": lim.PerDay},
		})
	})
}

// maxKnowledgeChunks bounds a plan's knowledge quota: far beyond any one
// Postgres' reach, and what an int64 sum of chunk counts holds with room.
const maxKnowledgeChunks = 1_000_000_000_000

// SetPlanKnowledge sets how many chunks the datastores of an organization
// on plan p may hold together (knowledge.Quota). Organizations already
// past a lowered quota keep what they hold; they add nothing more.
func (s *Service) SetPlanKnowledge(ctx context.Context, op *member.Member, p string, chunks int64) error {
	if !plan.Valid(p) {
		return apperr.New(apperr.NotFound, "there is no plan %q", p)
	}
	if chunks <= 0 || chunks > maxKnowledgeChunks {
		return apperr.InvalidField("knowledge_chunks", "must be a whole number from 1 to %d", int64(maxKnowledgeChunks))
	}
	return s.run(ctx, op, func(q *dbq.Queries) error {
		old, err := lockedPlan(ctx, q, p)
		if err != nil {
			return err
		}
		n, err := q.OperatorSetPlanKnowledge(ctx, dbq.OperatorSetPlanKnowledgeParams{ID: p, KnowledgeChunks: chunks})
		if err != nil {
			return err
		}
		if n != 1 {
			return errors.New("operator: plan knowledge update changed no row")
		}
		return audit(ctx, q, op, ActionPlanKnowledge, p, map[string]any{
			"from": map[string]int64{"knowledge_chunks": old.KnowledgeChunks},
			"to":   map[string]int64{"knowledge_chunks": chunks},
		})
	})
}

// lockedPlan is plan p's row, locked for the change an operator makes to
// it; NotFound when there is no such plan.
func lockedPlan(ctx context.Context, q *dbq.Queries, p string) (dbq.Plan, error) {
	old, err := q.OperatorLockPlan(ctx, p)
	if errors.Is(err, pgx.ErrNoRows) {
		return old, apperr.New(apperr.NotFound, "there is no plan %q", p)
	}
	return old, err
}

// catalog is the catalog, lowest first.
var catalog = []string{plan.Free, plan.Starter, plan.Pro, plan.Enterprise}

// upTo lists the plans no higher than p.
func upTo(p string) []string {
	var out []string
	for _, x := range catalog {
		if plan.AtMost(x, p) {
			out = append(out, x)
		}
	}
	return out
}

func audit(ctx context.Context, q *dbq.Queries, op *member.Member, action, target string, detail map[string]any) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	return q.InsertOperatorAudit(ctx, dbq.InsertOperatorAuditParams{ID: uuid.Must(uuid.NewV7()), OperatorID: op.ID,
		OperatorEmail: op.Email, Action: action, Target: target, Detail: b})
}
