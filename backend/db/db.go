// Package db opens Parley's Postgres pool, runs its migrations and scopes
// every transaction to one organization. Queries live in queries/*.sql and are
// generated into package dbq by sqlc; no SQL is assembled from input here.
//
// It must never run a tenant query outside Tenant: row-level security would
// then show nothing, and the explicit org_id filters would be the only wall.
package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	pgxvec "github.com/pgvector/pgvector-go/pgx"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/migrations"
)

// ErrNotFound is returned by helpers when a row does not exist.
var ErrNotFound = errors.New("not found")

// Store runs transactions over a pgx pool.
type Store struct {
	Pool *pgxpool.Pool
	// Timeout bounds a transaction begun with a context that has no
	// deadline: 0 is DefaultTimeout, negative none.
	Timeout time.Duration
	// OrgGone, when set, hears of an organization found deleted by a
	// tenant write (auth drops its cached keys, which may outlive it).
	OrgGone func(org uuid.UUID)
}

// DefaultMaxConns is the pool's size unless configured: pgx's own default
// (4 on two cores) left turns queueing for a connection; 16 gave 14 % more
// chat turns per second on two cores (docs/benchmarks.md).
const DefaultMaxConns = 16

// PoolSize is the one place that decides how many connections a pool of
// url opens at most: configured when positive (--db-max-conns), else the
// URL's own pool_max_conns (pgx's parameter, which an operator may already
// use), else DefaultMaxConns. The turn queue's bounds are derived from it.
func PoolSize(url string, configured int) int {
	if configured > 0 {
		// pgx's bound, which Open applies: the turn limits derived from
		// an unbounded size overflowed (--db-max-conns 9223372036854775807
		// ran one chat turn at a time, with none waiting).
		return min(configured, math.MaxInt32)
	}
	if c, err := pgconn.ParseConfig(url); err == nil {
		if _, ok := c.RuntimeParams["pool_max_conns"]; ok {
			if pc, err := pgxpool.ParseConfig(url); err == nil {
				return int(pc.MaxConns)
			}
		}
	}
	return DefaultMaxConns
}

// Open connects a pool of at most PoolSize(url, maxConns) connections to
// url and checks it answers. tracer, when not nil, sees every statement
// (tests count them).
func Open(ctx context.Context, url string, maxConns int, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	cfg.MaxConns = int32(PoolSize(url, maxConns))
	cfg.ConnConfig.Tracer = tracer
	// A connection is made within 10 s (unless the URL's connect_timeout
	// says otherwise), its startup included: a database that accepts and
	// never answers held `parley serve` at its first query for ever. A
	// peer gone without closing (a network path lost) is found by TCP
	// keepalives in about 30 s, where Linux's defaults take two hours.
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	cfg.ConnConfig.DialFunc = (&net.Dialer{KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3,
	}}).DialContext
	// The vector type, for embeddings (binary encoding, COPY); uuid.UUID
	// in binary.
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		RegisterUUID(conn.TypeMap())
		return pgxvec.RegisterTypes(ctx, conn)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}

// CheckRole refuses a role that row-level security does not bind: a
// superuser, or a role with BYPASSRLS, reads and writes every
// organization's rows whatever app.org_id says, and the database's wall
// between organizations is silently gone. Some managed services and
// container images hand out such a role by default.
func CheckRole(ctx context.Context, pool *pgxpool.Pool) error {
	var name string
	var super, bypass bool
	err := pool.QueryRow(ctx, "SELECT rolname, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user").Scan(&name, &super, &bypass)
	if err != nil {
		return fmt.Errorf("database: reading the role's attributes: %w", err)
	}
	if super || bypass {
		return fmt.Errorf("database role %q is a superuser or has BYPASSRLS, so row-level security does not apply to it and would not keep organizations apart: connect as a role without either (scripts/db-setup.sh makes one, parley)", name)
	}
	return nil
}

// Tenant runs fn in a transaction scoped to org: app.org_id is set local to
// the transaction, so it is gone at commit or rollback and the next user of
// the connection starts with none. Its statements are planned for their
// parameters, and not compiled (planned).
func (s *Store) Tenant(ctx context.Context, org uuid.UUID, fn func(q *dbq.Queries) error) error {
	return s.orgGone(org, s.scoped(ctx, Scope{"app.org_id", org.String()}, queries(fn), planned...))
}

// TenantTx is Tenant with the transaction itself, for work that must commit
// with the rows (enqueueing a job in the same transaction).
func (s *Store) TenantTx(ctx context.Context, org uuid.UUID, fn func(tx pgx.Tx, q *dbq.Queries) error) error {
	return s.orgGone(org, s.scoped(ctx, Scope{"app.org_id", org.String()}, fn, planned...))
}

// planned is how Tenant's statements are planned (docs/benchmarks.md,
// "Plans at volume"):
//   - for their own parameters, their organization's above all. pgx
//     prepares a statement once per connection, and after five runs
//     Postgres may keep a generic plan, costed for an average organization:
//     beside many small ones, a large organization's pages of
//     conversations or contacts then read all its rows: a page of 200,000
//     conversations 300 days back took 0.26–0.34 s against 1 ms, the first
//     page of 100,000 contacts 0.2 s against 0.03 ms. Planning costs tens
//     of microseconds a statement.
//   - without JIT compilation, which Postgres starts for any statement
//     whose estimated cost passes jit_above_cost, as a large
//     organization's do: compiling a contact's deletion
//     (ForgetContactLeadCaptures) took 0.6 s of its 0.62.
//
// The chat turn's batches (TenantBatch and its kin) keep the server's
// settings.
var planned = []Scope{{"plan_cache_mode", "force_custom_plan"}, {"jit", "off"}}

// TenantRow is TenantTx for one resource of org, named by rawID as a
// caller gave it: an id that is no UUID is NotFound, and fn finding no row
// (pgx.ErrNoRows) is Missing's answer for it, NotFound or, when it is
// another organization's, Forbidden. kind and label are Missing's.
func (s *Store) TenantRow(ctx context.Context, org uuid.UUID, kind, label, rawID string, fn func(tx pgx.Tx, q *dbq.Queries, id uuid.UUID) error) error {
	id, err := uuid.Parse(rawID)
	if err != nil {
		return apperr.New(apperr.NotFound, "%s %q not found", label, rawID)
	}
	return s.TenantTx(ctx, org, func(tx pgx.Tx, q *dbq.Queries) error {
		err := fn(tx, q, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return Missing(ctx, q, kind, label, id)
		}
		return err
	})
}

// TenantAsync is Tenant for a write whose loss in a crash costs little and
// can be told apart: its commit does not wait for the write-ahead log to
// reach disk (synchronous_commit off, for this transaction alone). A crash
// of Postgres within a fraction of a second after such a commit may lose
// it; nothing is ever half-written. Chat stores answers this way: the
// question is durable before the model is called, and an answer lost in a
// crash reads as a question without one.
func (s *Store) TenantAsync(ctx context.Context, org uuid.UUID, fn func(q *dbq.Queries) error) error {
	return s.orgGone(org, s.scoped(ctx, Scope{"app.org_id", org.String()}, queries(fn), Scope{"synchronous_commit", "off"}))
}

// TenantAsyncTx is TenantAsync with the transaction itself (an answer's
// webhook deliveries are enqueued with it).
func (s *Store) TenantAsyncTx(ctx context.Context, org uuid.UUID, fn func(tx pgx.Tx, q *dbq.Queries) error) error {
	return s.orgGone(org, s.scoped(ctx, Scope{"app.org_id", org.String()}, fn, Scope{"synchronous_commit", "off"}))
}

// orgGone turns a tenant write refused because the organization no longer
// exists into Unauthenticated, and says so to OrgGone. Authentication caches
// a key for auth.CacheTTL, so a deleted organization's key may still be let
// in for that long; its reads find nothing, its writes break the foreign key
// every tenant table has to organizations (named <table>_org_id_fkey, as
// Postgres names a column's reference; TestOrganizationForeignKeysAreNamed
// keeps it so). Without this the write is a 500.
func (s *Store) orgGone(org uuid.UUID, err error) error {
	var pgErr *pgconn.PgError
	fk := errors.As(err, &pgErr) && pgErr.Code == "23503" && strings.HasSuffix(pgErr.ConstraintName, "_org_id_fkey")
	if !fk && !errors.Is(err, errOrgRowGone) {
		return err
	}
	if s.OrgGone != nil {
		s.OrgGone(org)
	}
	// SECURITY: the key outlived its organization; it admits nothing more.
	return apperr.New(apperr.Unauthenticated, "this API key's organization no longer exists")
}

// errOrgRowGone is OrgRow's: the principal's organization row is gone.
var errOrgRowGone = errors.New("the organization's row is gone")

// OrgRow is the error of a read (or lock) of the principal's own
// organization row inside Tenant: none found means the organization was
// deleted while its key was still cached, which Tenant answers as it
// answers a write refused for it (Unauthenticated, the key forgotten),
// not as a 500.
func OrgRow(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return errOrgRowGone
	}
	return err
}

// KeyHolder runs fn in a transaction that may read the one API key whose
// SHA-256 is hash, and its organization, before the organization is known.
func (s *Store) KeyHolder(ctx context.Context, hash []byte, fn func(q *dbq.Queries) error) error {
	return s.scoped(ctx, Scope{"app.key_hash", fmt.Sprintf("%x", hash)}, queries(fn))
}

// PublicAgent runs fn in a transaction that may read the agent with this id,
// and its organization, if the agent is public: the way a visitor without a
// key reaches a public agent.
func (s *Store) PublicAgent(ctx context.Context, agentID uuid.UUID, fn func(q *dbq.Queries) error) error {
	return s.scoped(ctx, Scope{"app.public_agent_id", agentID.String()}, queries(fn))
}

// PublicForm runs fn in a transaction that may read the form with this id,
// and its organization, if the form is published: the way a visitor without
// a key reaches a form.
func (s *Store) PublicForm(ctx context.Context, formID uuid.UUID, fn func(q *dbq.Queries) error) error {
	return s.scoped(ctx, Scope{"app.public_form_id", formID.String()}, queries(fn))
}

// connConfig is the configuration of one connection to url, without the
// pool's own parameters (pool_max_conns and the other pool_*): pgx.ParseConfig
// keeps them as run-time parameters, which Postgres refuses ("unrecognized
// configuration parameter"), so that a URL giving pool_max_conns, as
// --db-max-conns documents, failed every migration and /readyz check.
func connConfig(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	return cfg.ConnConfig, nil
}

func migrator(url string) (*goose.Provider, *sql.DB, error) {
	cfg, err := connConfig(url)
	if err != nil {
		return nil, nil, err
	}
	sqldb := stdlib.OpenDB(*cfg)
	p, err := goose.NewProvider(goose.DialectPostgres, sqldb, migrations.FS)
	if err != nil {
		sqldb.Close()
		return nil, nil, err
	}
	return p, sqldb, nil
}

// migrateLock is the key of the session advisory lock Migrate holds: any
// number, the same for every Parley process.
const migrateLock int64 = 0x7061726c6579 // "parley"

// Migrate applies every pending migration: Parley's schema (goose), then
// River's job tables. Processes migrating one database at once (replicas
// started together, each with --migrate) take turns: the first applies
// what is pending, the others then find nothing left to apply.
func Migrate(ctx context.Context, url string) ([]*goose.MigrationResult, error) {
	p, sqldb, err := migrator(url)
	if err != nil {
		return nil, err
	}
	defer sqldb.Close()
	// Neither goose nor River locks: two processes both applied version 1,
	// and all but one failed on duplicate objects. A session lock on a
	// connection of its own, held until both are done (closing the
	// connection releases it, whatever happened).
	lockCfg, err := connConfig(url)
	if err != nil {
		return nil, err
	}
	lockConn, err := pgx.ConnectConfig(ctx, lockCfg)
	if err != nil {
		return nil, err
	}
	defer lockConn.Close(context.WithoutCancel(ctx))
	if _, err := lockConn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLock); err != nil {
		return nil, fmt.Errorf("waiting for another process's migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return res, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return res, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return res, fmt.Errorf("river migrations: %w", err)
	}
	return res, nil
}

// Pending reports how many migrations are not applied yet: Parley's and
// River's, as Migrate applies both. (River's alone counted as none: after
// a release whose River adds one, an instance started with --migrate=false
// was ready with its job tables behind, and its jobs failed.) Versions a
// newer release applied, which this binary does not know, are not counted:
// its instances keep running while a new release rolls out.
func Pending(ctx context.Context, url string) (int, error) {
	p, sqldb, err := migrator(url)
	if err != nil {
		return 0, err
	}
	defer sqldb.Close()
	st, err := p.Status(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range st {
		if m.State == goose.StatePending {
			n++
		}
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return 0, err
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	// Quiet: a dry run logs that it would apply nothing, and /readyz asks
	// this while migrations are pending.
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	// A dry run lists River's versions this binary knows and the database
	// lacks, as goose's status does Parley's: versions applied by a newer
	// release are none of this binary's business. (ExistingVersions
	// failed on them, "not found in migrator bundle": once a release's
	// `parley migrate` brought a River migration, an older instance
	// restarted during the roll was never ready, nor ran jobs.)
	res, err := m.Migrate(ctx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{DryRun: true})
	if err != nil {
		return 0, fmt.Errorf("river migrations: %w", err)
	}
	return n + len(res.Versions), nil
}

// Missing explains why a tenant query found no row for id: Forbidden when the
// id is a resource of another organization (SPEC §5.6), NotFound otherwise.
// kind is the resource_ids kind ("agent", "api_key"); label names it to users.
func Missing(ctx context.Context, q *dbq.Queries, kind, label string, id uuid.UUID) error {
	// SECURITY: the tenant query found nothing; the id registry tells only
	// whether the id exists elsewhere, never whose it is or what it holds.
	exists, err := q.ResourceExists(ctx, dbq.ResourceExistsParams{ID: id, Kind: kind})
	if err != nil {
		return err
	}
	missing := apperr.New(apperr.NotFound, "%s %q not found", label, id.String())
	if exists {
		return &otherOrganization{apperr.New(apperr.Forbidden, "%s %s belongs to another organization", label, id), missing}
	}
	return missing
}

// otherOrganization is Missing's error for an id of another organization:
// Forbidden to the API (SPEC §5.6); AsMissing gives what an unknown id's
// would have been.
type otherOrganization struct{ err, missing *apperr.Error }

func (e *otherOrganization) Error() string { return e.err.Error() }
func (e *otherOrganization) Unwrap() error { return e.err }

// AsMissing returns err, or, when err says that a resource belongs to
// another organization, the error an id that exists nowhere would have
// given ("agent \"...\" not found"): the console confirms nothing of what
// others hold.
func AsMissing(err error) error {
	var o *otherOrganization
	if errors.As(err, &o) {
		return o.missing
	}
	return err
}

// MemberEmail runs fn in a transaction that may read the member with this
// email before the organization is known (password sign-in).
func (s *Store) MemberEmail(ctx context.Context, email string, fn func(q *dbq.Queries) error) error {
	return s.scoped(ctx, Scope{"app.member_email", email}, queries(fn))
}

// Link runs fn in a transaction that may read the one-time link whose token
// has this SHA-256, before the organization is known. fn may then scope the
// transaction to the link's organization with q.SetTenant.
func (s *Store) Link(ctx context.Context, hash []byte, fn func(q *dbq.Queries) error) error {
	return s.scoped(ctx, Scope{"app.link_hash", fmt.Sprintf("%x", hash)}, queries(fn))
}

// ExpiredDeliveries runs fn in a transaction that may see and delete, in
// every organization, the webhook deliveries finished before before: the
// retention job's (webhook.Prune), and nothing else of any organization
// (migration 00022's policies).
func (s *Store) ExpiredDeliveries(ctx context.Context, before time.Time, fn func(q *dbq.Queries) error) error {
	return s.scoped(ctx, Scope{"app.webhook_expired_before", before.UTC().Format(time.RFC3339Nano)}, queries(fn))
}

// ExpiredLinks runs fn in a transaction that may see and delete, in every
// organization, the one-time links used or expired before before: the
// console's sweep (member.PruneLinks), and nothing else of any
// organization (migration 00030's policies).
func (s *Store) ExpiredLinks(ctx context.Context, before time.Time, fn func(q *dbq.Queries) error) error {
	return s.scoped(ctx, Scope{"app.link_expired_before", before.UTC().Format(time.RFC3339Nano)}, queries(fn))
}

// StalledIngestions runs fn in a transaction that may see, in every
// organization, the datasources pending or running unchanged since before
// before: the sweep of ingestions lost with their process (backend/jobs),
// which reads River's jobs beside them, and nothing else of any
// organization (migration 00028's policy).
func (s *Store) StalledIngestions(ctx context.Context, before time.Time, fn func(tx pgx.Tx) error) error {
	return s.scoped(ctx, Scope{"app.ingest_stalled_before", before.UTC().Format(time.RFC3339Nano)},
		func(tx pgx.Tx, _ *dbq.Queries) error { return fn(tx) })
}

// QueryName names a statement for traces: the sqlc query's name ("GetAgent",
// from its "-- name: GetAgent :one" header), else its first word
// ("SELECT"). Never the statement's text: a span name must stay a small set.
func QueryName(stmt string) string {
	s := strings.TrimSpace(stmt)
	if rest, ok := strings.CutPrefix(s, "-- name: "); ok {
		if name, _, ok := strings.Cut(rest, " "); ok && name != "" {
			return name
		}
	}
	if word, _, _ := strings.Cut(s, " "); word != "" && len(word) <= 32 {
		return strings.ToUpper(word)
	}
	return "query"
}
