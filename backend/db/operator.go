package db

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/db/dbq"
)

// Operator runs fn in a transaction that acts for the platform operator
// member: no organization is set, and app.operator_id names the member
// (local to the transaction, like app.org_id). The operator_* policies then
// let it read across organizations, but only if the database finds the member
// to be an operator (parley_is_operator); for anyone else it sees nothing.
// fn may scope the rest of the transaction to one organization with
// q.SetTenant, to change that organization's rows as the organization.
func (s *Store) Operator(ctx context.Context, memberID uuid.UUID, fn func(q *dbq.Queries) error) error {
	return s.scoped(ctx, Scope{"app.operator_id", memberID.String()}, queries(fn))
}

// CommandLine is Tenant for `parley admin`, and for it alone: the
// transaction is scoped to org and says it is the command line's
// (app.command_line), which migration 00026's triggers require to change
// what only the platform grants (a member's operator flag, an
// organization's plan and limits, an organization's creation).
//
// SECURITY: the server must never call it: a request's transaction that
// could set the platform's privileges is what those triggers stop.
// TestCommandLineScopeIsTheCommandLines keeps its callers to the
// functions of `parley admin`.
func (s *Store) CommandLine(ctx context.Context, org uuid.UUID, fn func(q *dbq.Queries) error) error {
	return s.CommandLineTx(ctx, org, queries(fn))
}

// CommandLineTx is CommandLine with the transaction itself (a deletion's
// jobs are deleted in it). The same rule holds: `parley admin` only.
func (s *Store) CommandLineTx(ctx context.Context, org uuid.UUID, fn func(tx pgx.Tx, q *dbq.Queries) error) error {
	return s.orgGone(org, s.scoped(ctx, Scope{"app.org_id", org.String()}, fn, Scope{"app.command_line", "on"}))
}

// CommandLineOrganizations runs fn in a transaction of `parley admin` that
// may read every organization's row (CommandLineOrganizations, migration
// 00037's policy) and no other row of any organization: for a command
// that walks them all (`parley admin reseal`), each organization's rows
// then in a Tenant transaction of its own.
//
// SECURITY: as CommandLine, the server must never call it
// (TestCommandLineScopeIsTheCommandLines).
func (s *Store) CommandLineOrganizations(ctx context.Context, fn func(q *dbq.Queries) error) error {
	return s.scoped(ctx, Scope{"app.command_line", "on"}, queries(fn))
}
