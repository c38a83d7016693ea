package db

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/parleyhq/parley/backend/db/dbq"
)

// TenantTxWith is TenantTx whose first statements travel with BEGIN and
// the scope, in one round trip (a pgx.Batch; issue 13: a chat turn's reads
// each cost one before). first names them by calling the queries on q, and
// runs twice: once on a q that records them (every result is then a zero
// value and every error nil: first must not decide anything on what its
// queries return, nor do anything else), then on a q that reads their
// results, in the same order; what it keeps of that second run is what fn
// sees. An error first returns from the second run ends the transaction
// (first may return nil for errors it handles, such as pgx.ErrNoRows). A
// statement that fails fails the ones after it in the batch. Then fn runs in
// the transaction as TenantTx's does.
func (s *Store) TenantTxWith(ctx context.Context, org uuid.UUID, first func(q *dbq.Queries) error, fn func(tx pgx.Tx, q *dbq.Queries) error) error {
	return s.orgGone(org, s.pipelined(ctx, []Scope{{"app.org_id", org.String()}}, first, fn))
}

// TenantAsyncTxWith is TenantTxWith committed as TenantAsync's are (not
// waiting for the write-ahead log to reach disk).
func (s *Store) TenantAsyncTxWith(ctx context.Context, org uuid.UUID, first func(q *dbq.Queries) error, fn func(tx pgx.Tx, q *dbq.Queries) error) error {
	return s.orgGone(org, s.pipelined(ctx, []Scope{{"app.org_id", org.String()}, {"synchronous_commit", "off"}}, first, fn))
}

// pipelined runs first's statements in a batch that begins the
// transaction and sets scopes (as query parameters: nothing is spliced
// into SQL here), then fn. A batch refused because the pooled connection
// was dead is sent again once: nothing commits before fn is done, so that
// is always safe.
func (s *Store) pipelined(ctx context.Context, scopes []Scope, first func(q *dbq.Queries) error, fn func(tx pgx.Tx, q *dbq.Queries) error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.recorded(ctx, scopes, first, func(sc *pgx.QueuedQuery, queued []*pgx.QueuedQuery) error {
		return s.sendPipelined(ctx, sc, queued, first, fn)
	})
}

// recorded records first's statements and calls send with them and the
// statement that sets scopes; a send whose BEGIN found the pooled
// connection dead (errBeginLost) is called once more.
func (s *Store) recorded(ctx context.Context, scopes []Scope, first func(q *dbq.Queries) error, send func(scope *pgx.QueuedQuery, queued []*pgx.QueuedQuery) error) error {
	scope, err := scopeQuery(scopes)
	if err != nil {
		return err
	}
	rec := &recorder{}
	if err := first(dbq.New(rec)); err != nil {
		return err
	}
	err = send(scope, rec.queued)
	if errors.Is(err, errBeginLost) && ctx.Err() == nil {
		err = send(scope, rec.queued)
	}
	if errors.Is(err, errBeginLost) {
		err = errors.Unwrap(err)
	}
	return unavailable(ctx, err)
}

// scopeQuery is "select set_config($1, $2, true), ...": the scopes as
// query parameters (nothing is spliced into SQL here).
func scopeQuery(scopes []Scope) (*pgx.QueuedQuery, error) {
	var sel strings.Builder
	args := make([]any, 0, 2*len(scopes))
	sel.WriteString("select ")
	for i, sc := range scopes {
		if strings.ContainsRune(sc.Name, 0) || strings.ContainsRune(sc.Value, 0) {
			return nil, errNUL
		}
		if i > 0 {
			sel.WriteString(", ")
		}
		fmt.Fprintf(&sel, "set_config($%d, $%d, true)", 2*i+1, 2*i+2)
		args = append(args, sc.Name, sc.Value)
	}
	return &pgx.QueuedQuery{SQL: sel.String(), Arguments: args}, nil
}

// errBeginLost wraps a lost connection found by the batch's BEGIN.
var errBeginLost = errors.New("the connection was lost before the transaction began")

type beginLost struct{ err error }

func (e beginLost) Error() string        { return e.err.Error() }
func (e beginLost) Unwrap() error        { return e.err }
func (e beginLost) Is(target error) bool { return target == errBeginLost }

func (s *Store) sendPipelined(ctx context.Context, scope *pgx.QueuedQuery, queued []*pgx.QueuedQuery, first func(q *dbq.Queries) error, fn func(tx pgx.Tx, q *dbq.Queries) error) error {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	queue(b, scope, queued)
	br := s.Pool.SendBatch(ctx, b)
	tx := br.Tx()
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	err := readBatch(br, queued, first)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	btx := bounded{tx, ctx}
	if err := fn(btx, dbq.New(btx)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// queue adds the scope and the recorded statements to b as new queued
// queries: pgx keeps on a queued query the statement it prepared for it on
// the connection that sent it, so a batch sent again (its BEGIN found the
// connection dead) must not reuse them, or it names a statement the new
// connection never prepared (SQLSTATE 26000).
func queue(b *pgx.Batch, scope *pgx.QueuedQuery, queued []*pgx.QueuedQuery) {
	b.Queue(scope.SQL, scope.Arguments...)
	for _, q := range queued {
		b.Queue(q.SQL, q.Arguments...)
	}
}

// readBatch reads the results of a batch that begins a transaction, sets
// its scope and runs queued: BEGIN's (beginLost when it found the
// connection dead), the scope's, then first's, replayed.
func readBatch(br pgx.BatchResults, queued []*pgx.QueuedQuery, first func(q *dbq.Queries) error) error {
	if _, err := br.Exec(); err != nil {
		if connectionLost(err) {
			return beginLost{err}
		}
		return err
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	rp := &replay{br: br, queued: queued}
	if err := first(dbq.New(rp)); err != nil {
		return err
	}
	if rp.next != len(queued) {
		return fmt.Errorf("db: the pipelined statements ran %d queries of %d the second time", rp.next, len(queued))
	}
	return nil
}

// TenantAsyncBatch is TenantAsyncTxWith with nothing to run after first:
// BEGIN, the scope, first's statements and COMMIT travel in one round trip
// (issue 13: a chat turn's answer). A statement that fails rolls the
// transaction back and nothing commits. (A first that runs other queries
// the second time is reported as TenantTxWith's is, but only once its
// recorded statements have committed.) A BEGIN that finds the pooled
// connection dead is retried as pipelined's is; the commit then travelled
// with it, so a retry after a commit that ran unseen fails on the rows' own
// keys rather than storing them twice (the answer's id is made before).
func (s *Store) TenantAsyncBatch(ctx context.Context, org uuid.UUID, first func(q *dbq.Queries) error) error {
	return s.oneTrip(ctx, org, first, Scope{"synchronous_commit", "off"})
}

// TenantBatch is TenantAsyncBatch committed as Tenant's are: COMMIT
// returns once the write-ahead log is on disk (a chat turn's question,
// which must be durable before the model is called, with the reads that
// decide where it goes). first's statements must then decide between
// themselves, in SQL, what they write: nothing in Go runs between them.
func (s *Store) TenantBatch(ctx context.Context, org uuid.UUID, first func(q *dbq.Queries) error) error {
	return s.oneTrip(ctx, org, first)
}

func (s *Store) oneTrip(ctx context.Context, org uuid.UUID, first func(q *dbq.Queries) error, more ...Scope) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	scopes := append([]Scope{{"app.org_id", org.String()}}, more...)
	return s.orgGone(org, s.recorded(ctx, scopes, first, func(scope *pgx.QueuedQuery, queued []*pgx.QueuedQuery) error {
		return s.sendOneTrip(ctx, scope, queued, first)
	}))
}

func (s *Store) sendOneTrip(ctx context.Context, scope *pgx.QueuedQuery, queued []*pgx.QueuedQuery, first func(q *dbq.Queries) error) error {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("begin")
	queue(b, scope, queued)
	b.Queue("commit")
	br := conn.SendBatch(ctx, b)
	err = readBatch(br, queued, first)
	if err == nil {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err == nil && tag.String() == "ROLLBACK" {
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	// A statement failed: Postgres skipped the rest, COMMIT too, and the
	// transaction waits aborted. End it here, or the pool would drop the
	// connection.
	if pc := conn.Conn().PgConn(); !pc.IsClosed() && pc.TxStatus() != 'I' {
		if _, rerr := conn.Exec(context.WithoutCancel(ctx), "rollback"); rerr != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}
	return err
}

// recorder is the DBTX of first's recording run: it queues each query and
// answers with nothing.
type recorder struct{ queued []*pgx.QueuedQuery }

func (r *recorder) queue(sql string, args []any) {
	r.queued = append(r.queued, &pgx.QueuedQuery{SQL: sql, Arguments: args})
}

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.queue(sql, args)
	return pgconn.CommandTag{}, nil
}

func (r *recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.queue(sql, args)
	return noRows{}, nil
}

func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.queue(sql, args)
	return noRows{}
}

func (r *recorder) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	return pgx.FailedBatchResults(&pgx.Batch{}, errors.New("db: no batch within pipelined statements"))
}

// noRows is what a recorded query returns: no row (a row's Scan leaves its
// destinations as they are).
type noRows struct{}

func (noRows) Close()                                       {}
func (noRows) Err() error                                   { return nil }
func (noRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (noRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (noRows) Next() bool                                   { return false }
func (noRows) Scan(...any) error                            { return nil }
func (noRows) Values() ([]any, error)                       { return nil, nil }
func (noRows) RawValues() [][]byte                          { return nil }
func (noRows) Conn() *pgx.Conn                              { return nil }
func (noRows) TypeMap() *pgtype.Map                         { return nil }

// replay is the DBTX of first's second run: each query reads the next
// result of the batch, and must be the query recorded there.
type replay struct {
	br     pgx.BatchResults
	queued []*pgx.QueuedQuery
	next   int
}

// check reports a query that is not the one recorded at its place.
func (r *replay) check(sql string) error {
	if r.next >= len(r.queued) || r.queued[r.next].SQL != sql {
		return errors.New("db: pipelined statements must run the same queries both times")
	}
	r.next++
	return nil
}

func (r *replay) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	if err := r.check(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.br.Exec()
}

func (r *replay) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	if err := r.check(sql); err != nil {
		return nil, err
	}
	return r.br.Query()
}

func (r *replay) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	if err := r.check(sql); err != nil {
		return errRow{err}
	}
	return r.br.QueryRow()
}

func (r *replay) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	return pgx.FailedBatchResults(&pgx.Batch{}, errors.New("db: no batch within pipelined statements"))
}

type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }
