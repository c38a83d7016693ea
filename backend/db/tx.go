package db

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parleyhq/parley/backend/apperr"
)

// errUnavailable is what a caller is told when the database connection
// fails: 503 with a hint to retry, never a 500.
var errUnavailable = &apperr.Error{Code: apperr.Unavailable, Message: "the database is unavailable; try again", RetryAfter: time.Second}

// tx runs fn in a transaction. Starting it is retried once when the pooled
// connection turns out dead (a restarted server, a killed backend): nothing
// was done yet, so that is always safe. A connection that fails later ends
// the request with errUnavailable; the transaction was not committed (or,
// if COMMIT itself was cut, its outcome is unknown and the client retries).
func (s *Store) tx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.Pool.Begin(ctx)
	if err != nil && connectionLost(err) && ctx.Err() == nil {
		tx, err = s.Pool.Begin(ctx)
	}
	if err != nil {
		return unavailable(ctx, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return unavailable(ctx, err)
	}
	return unavailable(ctx, tx.Commit(ctx))
}

// unavailable turns a lost connection into errUnavailable and leaves every
// other error as it is.
func unavailable(ctx context.Context, err error) error {
	if err == nil || !connectionLost(err) || ctx.Err() != nil {
		return err
	}
	slog.WarnContext(ctx, "database connection lost", "err", err)
	return errUnavailable
}

// connectionLost reports whether err means the connection to Postgres
// failed, rather than a statement.
func connectionLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 08: connection exception; 57P01..57P03: the server is shutting
		// down or the backend was terminated.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err) ||
		strings.Contains(err.Error(), "conn closed")
}
