package db

import (
	"context"

	"github.com/google/uuid"

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
