package db_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/dbtest"
)

// Pooled connections killed under the service (a restarted or failed-over
// Postgres): the next transactions start on fresh connections; a request
// is never a 500, at worst a 503 UNAVAILABLE.
func TestKilledConnectionsAreRetriedOrUnavailable(t *testing.T) {
	t.Parallel()
	pool, url := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	listPlans := func(q *dbq.Queries) error {
		_, err := q.ListPlans(ctx)
		return err
	}
	for name, read := range map[string]func() error{
		"Tenant": func() error { return store.Tenant(ctx, uuid.New(), listPlans) },
		"TenantTxWith (pipelined)": func() error {
			return store.TenantTxWith(ctx, uuid.New(), listPlans, func(pgx.Tx, *dbq.Queries) error { return nil })
		},
		"TenantAsyncBatch (one round trip)": func() error { return store.TenantAsyncBatch(ctx, uuid.New(), listPlans) },
		"TenantBatch (one round trip)":      func() error { return store.TenantBatch(ctx, uuid.New(), listPlans) },
	} {
		// Warm the pool: several connections, used just now.
		for range 8 {
			require.NoError(t, read(), name)
		}
		for round := range 3 {
			killer, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			tag, err := killer.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
			require.NoError(t, err)
			require.NoError(t, killer.Close(ctx))
			require.Positive(t, tag.RowsAffected(), "%s, round %d killed nothing", name, round)
			var ok, unavailable int
			for range 8 {
				err := read()
				switch {
				case err == nil:
					ok++
				case apperr.CodeOf(err) == apperr.Unavailable:
					unavailable++
				default:
					t.Fatalf("%s, round %d: a killed connection surfaced as %v", name, round, err)
				}
			}
			require.Positive(t, ok, "%s, round %d: nothing recovered", name, round)
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// A database that refuses new connections for a while (FATAL 55000: it
// does not allow them; 53300, too many, is the same kind of refusal): a
// transaction needing a new connection is 503 UNAVAILABLE, not a 500, and
// a write made through Retry (an answer the model was paid for) waits it
// out and lands.
func TestRefusedConnectionsAreUnavailableAndRetried(t *testing.T) {
	t.Parallel()
	pool, u := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(u)
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, dbtest.AdminURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(ctx) })
	allow := func(on bool) {
		_, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s WITH ALLOW_CONNECTIONS %t", pgx.Identifier{cfg.Database}.Sanitize(), on))
		require.NoError(t, err)
	}
	t.Cleanup(func() { allow(true) })
	read := func() error {
		return store.Tenant(ctx, uuid.New(), func(q *dbq.Queries) error {
			_, err := q.ListPlans(ctx)
			return err
		})
	}
	allow(false)
	pool.Reset() // no connection left: the next must be made
	err = read()
	require.Equal(t, apperr.Unavailable, apperr.CodeOf(err), "%v", err)

	go func() {
		time.Sleep(300 * time.Millisecond)
		allow(true)
	}()
	tries := 0
	require.NoError(t, db.Retry(ctx, func() error { tries++; return read() }))
	require.Greater(t, tries, 1, "the refusal was waited out")
}

// A database that stops answering without closing the connection (a
// stalled pooler or network path): a transaction begun without a deadline
// ends at the Store's bound as 503 UNAVAILABLE, whether its statements were
// pipelined with BEGIN or run by fn with the caller's context, and one
// begun with a deadline ends at that; once the database answers again, so
// does the Store.
func TestStalledDatabaseIsUnavailableWithinTheBound(t *testing.T) {
	t.Parallel()
	px := dbtest.NewProxy(t, dbtest.New(t))
	pool, err := db.Open(context.Background(), px.URL, 4, nil)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := &db.Store{Pool: pool, Timeout: 500 * time.Millisecond}
	ctx := context.Background() // no deadline, as a request's
	listPlans := func(q *dbq.Queries) error {
		_, err := q.ListPlans(ctx)
		return err
	}
	for name, read := range map[string]func(ctx context.Context) error{
		"Tenant (fn with the caller's context)": func(ctx context.Context) error { return store.Tenant(ctx, uuid.New(), listPlans) },
		"TenantTxWith (pipelined)": func(ctx context.Context) error {
			return store.TenantTxWith(ctx, uuid.New(), listPlans, func(pgx.Tx, *dbq.Queries) error { return nil })
		},
		"TenantBatch (one round trip)": func(ctx context.Context) error { return store.TenantBatch(ctx, uuid.New(), listPlans) },
	} {
		require.NoError(t, read(ctx), name)
		px.Stall()
		start := time.Now()
		err := read(ctx)
		require.Equal(t, apperr.Unavailable, apperr.CodeOf(err), "%s: %v", name, err)
		require.Less(t, time.Since(start), 3*time.Second, name)
		// A deadline of the caller's own is the caller's to keep.
		dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		start = time.Now()
		err = read(dctx)
		cancel()
		require.Error(t, err, name)
		require.Less(t, time.Since(start), 2*time.Second, name)
		px.Restore()
		require.Eventually(t, func() bool { return read(ctx) == nil }, 5*time.Second, 50*time.Millisecond, name)
	}
	// fn's own statements, sent after the transaction began, with the
	// caller's context: through its queries, on the transaction, in a batch.
	for name, send := range map[string]func(tx pgx.Tx, q *dbq.Queries) error{
		"queries": func(_ pgx.Tx, q *dbq.Queries) error { _, err := q.ListPlans(ctx); return err },
		"tx.Exec": func(tx pgx.Tx, _ *dbq.Queries) error { _, err := tx.Exec(ctx, "SELECT 1"); return err },
		"tx.SendBatch": func(tx pgx.Tx, _ *dbq.Queries) error {
			return tx.SendBatch(ctx, &pgx.Batch{QueuedQueries: []*pgx.QueuedQuery{{SQL: "SELECT 2"}}}).Close()
		},
	} {
		start := time.Now()
		err := store.TenantTx(ctx, uuid.New(), func(tx pgx.Tx, q *dbq.Queries) error {
			px.Stall()
			return send(tx, q)
		})
		require.Equal(t, apperr.Unavailable, apperr.CodeOf(err), "%s: %v", name, err)
		require.Less(t, time.Since(start), 3*time.Second, name)
		px.Restore()
		require.Eventually(t, func() bool { return store.Tenant(ctx, uuid.New(), listPlans) == nil }, 5*time.Second, 50*time.Millisecond, name)
	}
}

// A transaction's settings are query parameters: whatever a value holds
// (quotes, backslashes, an injection attempt), Postgres reads it back
// unchanged, and a NUL is refused before anything is sent.
func TestScopesAreParameters(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	for _, v := range []string{
		"plain@example.com", `o'brien@example.com`, `back\slash\'@example.com`, `x', true); drop table members; --`,
		`E'\\'`, "ünïcödé@example.com", "",
	} {
		var got, sync string
		require.NoError(t, store.Scoped(ctx, db.Scope{Name: "app.member_email", Value: v}, func(tx pgx.Tx, _ *dbq.Queries) error {
			return tx.QueryRow(ctx, "SELECT current_setting('app.member_email'), current_setting('synchronous_commit')").Scan(&got, &sync)
		}, db.Scope{Name: "synchronous_commit", Value: "off"}), v)
		require.Equal(t, v, got)
		require.Equal(t, "off", sync)
	}
	var members int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'members'").Scan(&members))
	require.Equal(t, 1, members)
	err := store.MemberEmail(ctx, "a\x00b", func(*dbq.Queries) error { return nil })
	require.Equal(t, apperr.Invalid, apperr.CodeOf(err))
}

// statements records the text of every statement a pool sends, as a
// tracer such as otelpgx records it (db.query.text).
type statements struct {
	mu  sync.Mutex
	sql []string
}

func (s *statements) add(sql string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sql = append(s.sql, sql)
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add(d.SQL)
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (s *statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.add(d.SQL)
}
func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (s *statements) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	s.add(d.SQL)
	return ctx
}
func (s *statements) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// The settings that find a member by email, a key or a link by its hash
// before the organization is known never appear in a statement's text,
// which traces record: they are query parameters.
func TestScopeValuesAreNotInStatementText(t *testing.T) {
	t.Parallel()
	_, url := dbtest.NewPool(t)
	rec := &statements{}
	pool, err := db.Open(context.Background(), url, 2, rec)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	none := func(*dbq.Queries) error { return nil }
	email, hash := "secret.member@example.com", []byte("a key's or a link's sha-256 hash")
	require.NoError(t, store.MemberEmail(ctx, email, none))
	require.NoError(t, store.KeyHolder(ctx, hash, none))
	require.NoError(t, store.Link(ctx, hash, none))

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.sql)
	for _, sql := range rec.sql {
		require.NotContains(t, sql, email)
		require.NotContains(t, sql, fmt.Sprintf("%x", hash))
	}
}

// Store.orgGone recognises a write for a deleted organization by the name of
// the foreign key it breaks: every reference to organizations must be named
// <table>_org_id_fkey, and no other constraint may end so.
func TestOrganizationForeignKeysAreNamed(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	rows, err := pool.Query(context.Background(), `SELECT conname, conrelid::regclass::text, confrelid::regclass::text,
		(SELECT array_agg(a.attname::text) FROM pg_attribute a WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey))
		FROM pg_constraint c WHERE contype = 'f' AND connamespace = 'public'::regnamespace`)
	require.NoError(t, err)
	defer rows.Close()
	toOrgs := 0
	for rows.Next() {
		var name, table, refs string
		var cols []string
		require.NoError(t, rows.Scan(&name, &table, &refs, &cols))
		if refs == "organizations" {
			toOrgs++
			require.Equal(t, table+"_org_id_fkey", name, "a reference to organizations")
			require.Equal(t, []string{"org_id"}, cols)
		} else {
			require.False(t, strings.HasSuffix(name, "_org_id_fkey"), "%s on %s references %s, not organizations", name, table, refs)
		}
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, toOrgs, 7, "the tenant tables reference organizations")
}

// A text Postgres cannot store (invalid UTF-8; NUL is refused the same
// way) is a 400 whatever path brought it, never a 500: the backstop behind
// the API's own validation, which names the field.
func TestTextPostgresRefusesIsInvalid(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	org, _, err := account.Bootstrap(ctx, store, "Texts", "free")
	require.NoError(t, err)
	err = store.Tenant(ctx, org, func(q *dbq.Queries) error {
		_, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{OrgID: org, ID: uuid.New(), Name: "bad \xff name", EmbeddingModel: "m", EmbeddingDim: 512})
		return err
	})
	require.Equal(t, apperr.Invalid, apperr.CodeOf(err), "%v", err)
	err = store.Tenant(ctx, org, func(q *dbq.Queries) error {
		_, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{OrgID: org, ID: uuid.New(), Name: "fine", EmbeddingModel: "m", EmbeddingDim: 512})
		return err
	})
	require.NoError(t, err)
	// A \u0000 in JSON stored as jsonb (SQLSTATE 22P05) is the same text.
	err = store.Scoped(ctx, db.Scope{Name: "app.org_id", Value: org.String()}, func(tx pgx.Tx, _ *dbq.Queries) error {
		_, err := tx.Exec(ctx, `SELECT $1::jsonb`, `{"note":"a\u0000b"}`)
		return err
	})
	require.Equal(t, apperr.Invalid, apperr.CodeOf(err), "%v", err)
}

// A write Postgres refuses because another request changed the same rows
// meanwhile is a client error, never a 500: a row whose parent was deleted
// since it was read is NotFound naming the parent, a deadlock is Aborted
// (nothing done, send it again). The PgError stays inside for callers that
// decide on it.
func TestRacedWritesAreClientErrors(t *testing.T) {
	t.Parallel()
	pool, _ := dbtest.NewPool(t)
	store := &db.Store{Pool: pool}
	ctx := context.Background()
	org, _, err := account.Bootstrap(ctx, store, "Races", "free")
	require.NoError(t, err)

	err = store.Tenant(ctx, org, func(q *dbq.Queries) error {
		_, err := q.CreateDatasource(ctx, dbq.CreateDatasourceParams{OrgID: org, ID: uuid.New(), DatastoreID: uuid.New(),
			Type: "text", Name: "orphan", Config: []byte("{}"), ContentType: "text/plain"})
		return err
	})
	require.Equal(t, apperr.NotFound, apperr.CodeOf(err), "%v", err)
	require.Equal(t, "the datastore this request refers to no longer exists (deleted meanwhile)", err.Error())
	require.True(t, db.ForeignKeyViolation(err), "the cause is still there")

	// Two transactions updating two rows in opposite orders: Postgres ends
	// one of them (after deadlock_timeout, 1 s by default).
	ids := [2]uuid.UUID{uuid.New(), uuid.New()}
	for i, id := range ids {
		require.NoError(t, store.Tenant(ctx, org, func(q *dbq.Queries) error {
			_, err := q.CreateDatastore(ctx, dbq.CreateDatastoreParams{OrgID: org, ID: id, Name: fmt.Sprint("d", i), EmbeddingModel: "m", EmbeddingDim: 512})
			return err
		}))
	}
	var locked sync.WaitGroup
	locked.Add(2)
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			errs <- store.TenantTx(ctx, org, func(tx pgx.Tx, _ *dbq.Queries) error {
				touch := func(id uuid.UUID) error {
					_, err := tx.Exec(ctx, "UPDATE datastores SET name = name WHERE org_id = $1 AND id = $2", org, id)
					return err
				}
				if err := touch(ids[i]); err != nil {
					locked.Done()
					return err
				}
				locked.Done()
				locked.Wait()
				return touch(ids[1-i])
			})
		}()
	}
	first, second := <-errs, <-errs
	if first == nil {
		first, second = second, first
	}
	require.NoError(t, second, "one of the two commits")
	require.Equal(t, apperr.Aborted, apperr.CodeOf(first), "%v", first)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, first, &pgErr)
	require.Equal(t, "40P01", pgErr.Code)
}
