package db

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/backend/db/dbq"
)

// Scoped is scoped, for the external tests.
func (s *Store) Scoped(ctx context.Context, first Scope, fn func(tx pgx.Tx, q *dbq.Queries) error, more ...Scope) error {
	return s.scoped(ctx, first, fn, more...)
}
