package db

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
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

// errNotText is what a caller is told when Postgres refuses a text holding
// NUL or bytes that are not UTF-8 (SQLSTATE 22021; 22P05 for a \u0000 in
// JSON stored as jsonb), which the API's
// validation did not catch (wire.Validate refuses them with the field
// named): 400, never a 500.
var errNotText = apperr.New(apperr.Invalid, "a text holds a NUL character or bytes that are not UTF-8")

// DefaultTimeout bounds a transaction whose context has no deadline of its
// own (Store.Timeout): an API request's, which would otherwise wait as
// long as its client on a database that stopped answering without closing
// the connection (a stalled pooler or network path). Chat turns, jobs and
// deliveries bring deadlines of their own.
const DefaultTimeout = 30 * time.Second

// DeleteTimeout bounds a delete that takes a tenant's bulk with it (a
// datastore's chunks and their postings, an agent's conversations and
// messages), which at a million rows takes longer than DefaultTimeout.
const DeleteTimeout = 10 * time.Minute

// errStalled ends a transaction's context at its bound.
var errStalled = errors.New("db: the transaction ran past its bound")

// bound gives ctx the Store's bound when it has no deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	d := cmp.Or(s.Timeout, DefaultTimeout)
	if _, ok := ctx.Deadline(); ok || d < 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, d, errStalled)
}

// Bounded runs fn, which works on the pool outside a transaction of the
// Store's (the console's session statements), under the Store's bound,
// and tells its errors as a transaction's: past the bound or a lost
// connection is Unavailable (503).
func (s *Store) Bounded(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return unavailable(ctx, fn(ctx))
}

// bounded is a transaction whose statements, when given a context without
// a deadline (a handler's request context), run under the transaction's
// own (bound), derived from the context the transaction was begun with:
// fn gets it as its pgx.Tx and under its queries, so that what it sends
// itself (a webhook's event, a River job's insert, a batch) is bounded too.
type bounded struct {
	pgx.Tx
	ctx context.Context
}

func (b bounded) pick(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); ok {
		return ctx
	}
	return b.ctx
}

func (b bounded) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return b.Tx.Exec(b.pick(ctx), sql, args...)
}

func (b bounded) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return b.Tx.Query(b.pick(ctx), sql, args...)
}

func (b bounded) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return b.Tx.QueryRow(b.pick(ctx), sql, args...)
}

func (b bounded) SendBatch(ctx context.Context, batch *pgx.Batch) pgx.BatchResults {
	return b.Tx.SendBatch(b.pick(ctx), batch)
}

func (b bounded) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	return b.Tx.CopyFrom(b.pick(ctx), table, columns, rows)
}

func (b bounded) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return b.Tx.Prepare(b.pick(ctx), name, sql)
}

func (b bounded) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := b.Tx.Begin(b.pick(ctx))
	if err != nil {
		return nil, err
	}
	return bounded{tx, b.ctx}, nil
}

// unavailable turns a lost connection, or a transaction past its bound,
// into errUnavailable, a text Postgres cannot store into errNotText, a
// write another request's change refused into what raced says, and leaves
// every other error as it is.
func unavailable(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "22021" || pgErr.Code == "22P05") {
		return errNotText
	}
	if e := raced(ctx, pgErr); e != nil {
		return e
	}
	if err != nil && errors.Is(context.Cause(ctx), errStalled) {
		slog.WarnContext(ctx, "database did not answer in time", "err", err)
		return errUnavailable
	}
	if err == nil || !connectionLost(err) || ctx.Err() != nil {
		return err
	}
	slog.WarnContext(ctx, "database connection lost", "err", err)
	return errUnavailable
}

// raced is what a client hears of a statement Postgres refused because
// another request changed the same rows meanwhile, nil for any other
// error (or none):
//   - a row whose parent was deleted since it was read (23503 on a
//     reference to one of the tenant resources a request names, parents:
//     a reply to a conversation whose agent is being deleted, a
//     datasource added to a datastore being deleted) is NotFound naming
//     the parent, as the request would have found it a moment later. Its
//     organization's own reference (<table>_org_id_fkey) is left to
//     Store.orgGone, and any other (a plan) stays an internal error.
//   - a deadlock or a serialization failure (40P01, 40001; a delete
//     cascading through rows a turn updates in the other order) is
//     Aborted: nothing was done, and the request may be sent again.
//
// Each is logged as a warning with its constraint or detail: a reference
// the handler should have checked, or two statements taking locks in
// opposite orders, stays visible. The PgError stays inside (apperr.Wrap)
// for callers that decide on it (ForeignKeyViolation, orgGone).
func raced(ctx context.Context, pgErr *pgconn.PgError) error {
	if pgErr == nil {
		return nil
	}
	switch pgErr.Code {
	case "23503":
		parent := parentOf(pgErr)
		if !parents[parent] {
			return nil
		}
		slog.WarnContext(ctx, "write refused: its parent is gone", "constraint", pgErr.ConstraintName)
		return apperr.Wrap(pgErr, apperr.NotFound, "the %s this request refers to no longer exists (deleted meanwhile)", parent)
	case "40P01", "40001":
		slog.WarnContext(ctx, "transaction aborted by a concurrent one", "code", pgErr.Code, "detail", pgErr.Detail)
		return apperr.Wrap(pgErr, apperr.Aborted, "another request was changing the same data at the same time; nothing was done, try again")
	}
	return nil
}

// parents are the rows a request names that another may delete meanwhile,
// as parentOf names them.
var parents = map[string]bool{
	"agent": true, "conversation": true, "contact": true, "datastore": true, "datasource": true,
	"form": true, "webhook": true, "delivery": true, "member": true,
}

// parentOf names the row a foreign key refers to, from the constraint's
// name as Postgres makes it (<table>_<columns>_fkey): the last column,
// without its _id ("messages_org_id_conversation_id_fkey": conversation).
func parentOf(pgErr *pgconn.PgError) string {
	cols := strings.TrimSuffix(strings.TrimPrefix(pgErr.ConstraintName, pgErr.TableName+"_"), "_fkey")
	parts := strings.Split(cols, "_id_")
	return strings.ReplaceAll(strings.TrimSuffix(parts[len(parts)-1], "_id"), "_", " ")
}

// connectionLost reports whether err means the connection to Postgres
// failed, rather than a statement.
func connectionLost(err error) bool {
	// A new connection that could not be made, for whatever reason, is an
	// outage, first: the server's refusal inside it (FATAL 53300 too many
	// connections, 55000 the database does not allow connections, 57P03
	// starting up) is a PgError too, and none of a statement's.
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 08: connection exception; 57P01..57P03: the server is shutting
		// down or the backend was terminated; 53300: too many connections.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" ||
			pgErr.Code == "53300"
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err) ||
		strings.Contains(err.Error(), "conn closed")
}

// Unavailable reports whether err is the database being out of reach (a
// lost or refused connection, or one that stalled past the bound): worth
// trying again shortly, unlike a statement's error.
func Unavailable(err error) bool { return errors.Is(err, errUnavailable) }

// Retry runs write until it is done, fails other than by a lost
// connection (errUnavailable), or ctx ends, waiting 100 ms before the
// second try and twice as long before each next, at most 2 s. It is for a
// write worth waiting for (an answer the model was paid for): a short
// outage or a failover then costs time, not the write. write must be
// safe to send again: its rows' keys fixed before the first try, so that a
// try whose commit landed though the connection was lost before its reply
// makes the next fail on its own key, which the caller counts as done
// (Duplicate).
func Retry(ctx context.Context, write func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := write()
		if !Unavailable(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// Duplicate reports whether err is Postgres refusing a row whose key is
// taken (SQLSTATE 23505) under constraint.
func Duplicate(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == constraint
}

// Scope is a setting local to one transaction: the row-level security
// policies read app.org_id and its kin to decide which rows it sees.
type Scope struct{ Name, Value string }

// scoped runs fn in a transaction begun with its settings in place. BEGIN
// and the settings travel together in one batch (pipelined, with nothing
// first), so a scoped transaction costs no round trip more than a bare one;
// the settings are query parameters, never spliced into the statement's
// text, which traces record (an email, a key's or a link's hash).
func (s *Store) scoped(ctx context.Context, first Scope, fn func(tx pgx.Tx, q *dbq.Queries) error, more ...Scope) error {
	return s.pipelined(ctx, append([]Scope{first}, more...), func(*dbq.Queries) error { return nil }, fn)
}

// queries adapts a function of the queries alone to scoped.
func queries(fn func(q *dbq.Queries) error) func(pgx.Tx, *dbq.Queries) error {
	return func(_ pgx.Tx, q *dbq.Queries) error { return fn(q) }
}

// errNUL refuses a scope whose value holds NUL, which no setting can.
var errNUL = apperr.New(apperr.Invalid, "a value holds a NUL character")

// ForeignKeyViolation reports whether err is Postgres refusing a row whose
// parent is gone (SQLSTATE 23503): a resource deleted since it was read;
// when constraints are named, by one of them.
func ForeignKeyViolation(err error, constraints ...string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503" &&
		(len(constraints) == 0 || slices.Contains(constraints, pgErr.ConstraintName))
}

// InBatches runs step, a transaction deleting at most batch rows, again
// and again until one deletes fewer or ctx ends, and returns how many it
// deleted in all: a backlog goes in bounded transactions (the retention
// sweeps of webhook deliveries and of one-time links).
func InBatches(ctx context.Context, batch int64, step func() (int64, error)) (int64, error) {
	var total int64
	for {
		n, err := step()
		total += n
		if err != nil || n < batch {
			return total, err
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}
