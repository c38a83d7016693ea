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
	"github.com/parleyhq/parley/backend/db/dbq"
)

// errUnavailable is what a caller is told when the database connection
// fails: 503 with a hint to retry, never a 500.
var errUnavailable = &apperr.Error{Code: apperr.Unavailable, Message: "the database is unavailable; try again", RetryAfter: time.Second}

// tx runs fn in a transaction. Starting it is retried once when the pooled
// connection turns out dead (a restarted server, a killed backend): nothing
// was done yet, so that is always safe. A connection that fails later ends
// the request with errUnavailable; the transaction was not committed (or,
// if COMMIT itself was cut, its outcome is unknown and the client retries).
func (s *Store) tx(ctx context.Context, opts pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	tx, err := s.Pool.BeginTx(ctx, opts)
	if err != nil && connectionLost(err) && ctx.Err() == nil {
		tx, err = s.Pool.BeginTx(ctx, opts)
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

// Scope is a setting local to one transaction: the row-level security
// policies read app.org_id and its kin to decide which rows it sees.
type Scope struct{ Name, Value string }

// scoped runs fn in a transaction begun with its settings in place. BEGIN
// and the settings travel as one simple-protocol message, so a scoped
// transaction costs no round trip more than a bare one.
func (s *Store) scoped(ctx context.Context, first Scope, fn func(tx pgx.Tx, q *dbq.Queries) error, more ...Scope) error {
	begin, err := beginQuery(append([]Scope{first}, more...))
	if err != nil {
		return err
	}
	return s.tx(ctx, pgx.TxOptions{BeginQuery: begin}, func(tx pgx.Tx) error { return fn(tx, dbq.New(tx)) })
}

// queries adapts a function of the queries alone to scoped.
func queries(fn func(q *dbq.Queries) error) func(pgx.Tx, *dbq.Queries) error {
	return func(_ pgx.Tx, q *dbq.Queries) error { return fn(q) }
}

// beginQuery is "begin; select set_config(name, value, true), ..." with each
// name and value written as an escaped string literal (E'...': backslashes
// and quotes escaped, whatever standard_conforming_strings says). Values are
// ids, hashes and emails; one holding NUL cannot be a setting and is refused.
func beginQuery(scopes []Scope) (string, error) {
	var b strings.Builder
	b.WriteString("begin; select ")
	for i, sc := range scopes {
		if strings.ContainsRune(sc.Name, 0) || strings.ContainsRune(sc.Value, 0) {
			return "", errNUL
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("set_config(")
		writeLiteral(&b, sc.Name)
		b.WriteString(", ")
		writeLiteral(&b, sc.Value)
		b.WriteString(", true)")
	}
	return b.String(), nil
}

func writeLiteral(b *strings.Builder, s string) {
	b.WriteString("E'")
	for _, r := range s {
		switch r {
		case '\\', '\'':
			b.WriteRune('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('\'')
}

// errNUL refuses a scope whose value holds NUL, which no setting can.
var errNUL = apperr.New(apperr.Invalid, "a value holds a NUL character")

// ForeignKeyViolation reports whether err is Postgres refusing a row whose
// parent is gone (SQLSTATE 23503): a resource deleted since it was read.
func ForeignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}
