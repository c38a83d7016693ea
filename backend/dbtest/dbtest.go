// Package dbtest gives each test a Postgres database of its own, as the
// migrations leave it. Tests need a Postgres with pgvector reachable at
// PARLEY_TEST_DATABASE_URL (default: the one scripts/db-setup.sh prepares)
// by a role with CREATEDB.
//
// A template is migrated once per migration set. A test's database is not
// cloned and dropped each time (a DROP DATABASE forces a checkpoint: about
// 2 s a test on a busy machine, and 154 s of a whole run's Postgres time):
// databases cloned from the template are kept in a pool, named after it, and
// claimed with an advisory lock held while the test runs, across every test
// process at once. A claimed database is emptied first: the tables a test
// wrote into emptied and the rows the migrations seeded put back, its
// sequences set as the template had them (dbtest_seed.reset, installed in
// the template; seedSQL says how). One
// whose schema a test changed (an index a benchmark built, a table of its
// own) no longer matches the template's fingerprint and is dropped and cloned
// again instead.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/migrations"
)

// AdminURL is the database tests connect to for creating and dropping theirs.
func AdminURL() string {
	if u := os.Getenv("PARLEY_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://parley:parley@127.0.0.1:5432/parley?sslmode=disable"
}

// RedisURL is the Redis tests use.
func RedisURL() string {
	if u := os.Getenv("PARLEY_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// New gives t a migrated database of its own, as the migrations leave it,
// until t ends, and returns its URL.
func New(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	process.Lock()
	defer process.Unlock()
	admin, err := process.adminConn(ctx)
	if err != nil {
		t.Fatalf("dbtest: connecting to %s (run scripts/db-setup.sh): %v", redact(AdminURL()), err)
	}
	tpl := templateName(t)
	if err := ensureTemplate(ctx, admin, tpl); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	name, err := claimPooled(ctx, admin, tpl)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	process.claimed[name] = true
	t.Cleanup(func() { process.release(name) })
	return withDB(AdminURL(), name)
}

// process is what a test process keeps from one test to the next: a
// connection to the admin database holding the advisory lock of every
// pooled database its tests hold (advisory locks are per database, so every
// claim is made there), and a connection into each pooled database it has
// emptied, to empty it again. A new Postgres connection costs the server
// about 40 ms of CPU on the 2-core machines this runs on (a forked backend's
// first page faults), and there are two to save a test.
var process = &keeper{claimed: map[string]bool{}, resetters: map[string]*pgx.Conn{}}

type keeper struct {
	sync.Mutex
	admin     *pgx.Conn
	claimed   map[string]bool      // pooled databases this process's tests hold
	resetters map[string]*pgx.Conn // a connection into each pooled database emptied
}

// adminConn is the admin connection, made again if it was lost (the locks
// it held went with it). The caller holds k's lock.
func (k *keeper) adminConn(ctx context.Context) (*pgx.Conn, error) {
	if k.admin != nil && k.admin.Ping(ctx) == nil {
		return k.admin, nil
	}
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return nil, err
	}
	k.admin, k.claimed = conn, map[string]bool{}
	return conn, nil
}

// release gives back the pooled database name when its test ends.
func (k *keeper) release(name string) {
	k.Lock()
	defer k.Unlock()
	if !k.claimed[name] {
		return
	}
	delete(k.claimed, name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := k.admin.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", name); err != nil {
		// The lock is the session's: a lost session holds none.
		k.admin.Close(ctx) //nolint:errcheck
		k.admin = nil
	}
}

// resetter is a connection into the pooled database name, kept for the
// next time it is emptied. The caller holds k's lock.
func (k *keeper) resetter(ctx context.Context, name string) (*pgx.Conn, error) {
	if c := k.resetters[name]; c != nil {
		if c.Ping(ctx) == nil {
			return c, nil
		}
		c.Close(ctx) //nolint:errcheck
		delete(k.resetters, name)
	}
	c, err := pgx.Connect(ctx, withDB(AdminURL(), name))
	if err != nil {
		return nil, err
	}
	k.resetters[name] = c
	return c, nil
}

// forget closes the kept connection into name (before it is dropped).
func (k *keeper) forget(name string) {
	if c := k.resetters[name]; c != nil {
		c.Close(context.Background()) //nolint:errcheck
		delete(k.resetters, name)
	}
}

// claimPooled locks the first free database of tpl's pool and makes it as
// the template is: emptied if it exists and still has the template's
// schema, cloned from the template otherwise.
func claimPooled(ctx context.Context, claim *pgx.Conn, tpl string) (string, error) {
	prefix := "parley_pool_" + strings.TrimPrefix(tpl, "parley_tpl_") + "_"
	for i := 0; i < 1000; i++ {
		name := prefix + strconv.Itoa(i)
		if process.claimed[name] {
			// Held by another test of this process: its session's lock
			// would be taken again, not refused.
			continue
		}
		var mine bool
		if err := claim.QueryRow(ctx, tryLockSQL, name).Scan(&mine); err != nil {
			return "", err
		}
		if !mine {
			continue
		}
		var exists bool
		if err := claim.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
			return "", err
		}
		if exists {
			err := reset(ctx, claim, name)
			if err == nil {
				return name, nil
			}
			if !errors.Is(err, errSchemaChanged) {
				return "", fmt.Errorf("emptying %s: %w", name, err)
			}
			process.forget(name)
			if err := dropDatabase(ctx, claim, name); err != nil {
				return "", err
			}
		}
		// Cloning needs no lock on the template: it exists only once fully
		// migrated, and Postgres lets any number of clones copy it at once.
		if _, err := claim.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
			pgx.Identifier{name}.Sanitize(), pgx.Identifier{tpl}.Sanitize())); err != nil {
			return "", err
		}
		return name, nil
	}
	return "", errors.New("no free database in the pool of 1000")
}

var errSchemaChanged = errors.New("schema changed")

// tryLockSQL claims a pooled database by name: the lock is the claim,
// held by the claiming connection's session.
const tryLockSQL = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))"

// dropDatabase drops name if it exists, closing its connections.
func dropDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// reset empties the pooled database name (see the package's comment),
// closing first any connection its last test left open. The caller holds
// process's lock.
func reset(ctx context.Context, claim *pgx.Conn, name string) error {
	conn, err := process.resetter(ctx, name)
	if err != nil {
		return err
	}
	if _, err := claim.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() AND pid <> $2",
		name, conn.PgConn().PID()); err != nil {
		return err
	}
	var same bool
	if err := conn.QueryRow(ctx, "SELECT dbtest_seed.fingerprint() = (SELECT fingerprint FROM dbtest_seed.template)").Scan(&same); err != nil {
		return err
	}
	if !same {
		return errSchemaChanged
	}
	_, err = conn.Exec(ctx, "SELECT dbtest_seed.reset()")
	return err
}

// ensureTemplate makes the migrated template tpl unless it exists. It is
// migrated under another name and renamed when done, so that a template
// that exists is complete; one lock serialises the building across test
// processes.
func ensureTemplate(ctx context.Context, admin *pgx.Conn, tpl string) error {
	exists := func() (bool, error) {
		var ok bool
		err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tpl).Scan(&ok)
		return ok, err
	}
	if ok, err := exists(); err != nil || ok {
		return err
	}
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(727274)"); err != nil {
		return err
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(727274)") //nolint:errcheck
	if ok, err := exists(); err != nil || ok {
		return err
	}
	building := tpl + "_building"
	if err := dropDatabase(ctx, admin, building); err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return err
	}
	if err := migrateTemplate(ctx, withDB(AdminURL(), building)); err != nil {
		_ = dropDatabase(ctx, admin, building)
		return fmt.Errorf("migrating template: %w", err)
	}
	dropStalePools(ctx, admin, tpl)
	_, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", pgx.Identifier{building}.Sanitize(), pgx.Identifier{tpl}.Sanitize()))
	return err
}

// seedSQL installs dbtest_seed in a migrated template: every table's rows
// as the migrations left them (a copy and a hash of each table they put rows
// in), the sequences' values, the foreign keys between tables, the schema's
// fingerprint, and reset, which puts a database cloned from the template
// back as it was.
//
// reset deletes rather than truncates: a TRUNCATE gives every table and
// index a new file (0.13–0.85 s for the whole schema, against 20 ms now),
// and most tests write into a handful of tables. It empties only the tables
// that differ from the template (a row in a table the migrations left
// empty, a seeded table whose rows' hash changed; a plain table with no
// page is not looked at) and with them every table that references one,
// the referencing tables first (a table over 1 MiB with its indexes is
// truncated), then puts the seed rows back, the referenced tables first.
// The owner is held to its forced row-level policies and fires its own
// triggers: both are lifted inside reset's transaction, so each table
// comes back as the template has it and nothing else is written. Foreign
// keys that form a cycle cannot be ordered: the template is refused with a
// message saying so.
const seedSQL = `
CREATE SCHEMA dbtest_seed;

CREATE FUNCTION dbtest_seed.fingerprint() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT md5(string_agg(c.relname || ':' || c.relkind::text || ':' || coalesce((
      SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ',' ORDER BY a.attnum)
      FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), ''), ';' ORDER BY c.relname))
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = 'public'
$$;

-- rows_hash is the hash of every row of the public table rel, in an order
-- of their own (rows as jsonb, whose text is canonical).
CREATE FUNCTION dbtest_seed.rows_hash(rel text) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE h text;
BEGIN
  EXECUTE format('SELECT md5(coalesce(string_agg(to_jsonb(x)::text, E''\n'' ORDER BY to_jsonb(x)::text), '''')) FROM public.%I x', rel) INTO h;
  RETURN h;
END $$;

CREATE FUNCTION dbtest_seed.has_rows(rel text) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
DECLARE found boolean;
BEGIN
  EXECUTE format('SELECT EXISTS (SELECT 1 FROM public.%I)', rel) INTO found;
  RETURN found;
END $$;

CREATE TABLE dbtest_seed.template AS SELECT dbtest_seed.fingerprint() AS fingerprint;
CREATE TABLE dbtest_seed.sequences AS
  SELECT sequencename, last_value, start_value FROM pg_sequences WHERE schemaname = 'public';

-- refs: the child table's rows reference the parent's (a table referencing
-- itself left out: one DELETE empties it).
CREATE TABLE dbtest_seed.refs AS
  SELECT DISTINCT r.relname::text COLLATE "default" AS child, p.relname::text COLLATE "default" AS parent
  FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid JOIN pg_class p ON p.oid = c.confrelid
  JOIN pg_namespace n ON n.oid = r.relnamespace
  WHERE c.contype = 'f' AND n.nspname = 'public' AND c.conrelid <> c.confrelid;

-- tables: every public table; seeded is the hash of its rows when the
-- migrations left rows in it; rank orders the deletes (a table's rank is
-- above that of every table referencing it); triggers are its enabled
-- triggers of its own (not the foreign keys' internal ones).
CREATE TABLE dbtest_seed.tables AS
  SELECT c.relname::text COLLATE "default" AS relname, c.relkind, c.relforcerowsecurity AS forced, NULL::text AS seeded, 0 AS rank,
         ARRAY(SELECT t.tgname::text FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal AND t.tgenabled <> 'D' ORDER BY t.tgname) AS triggers
  FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
  WHERE ns.nspname = 'public' AND c.relkind IN ('r', 'p');

DO $$
DECLARE r record; n int := 0; cycle text;
BEGIN
  FOR r IN SELECT relname FROM dbtest_seed.tables WHERE forced LOOP
    EXECUTE format('ALTER TABLE public.%I NO FORCE ROW LEVEL SECURITY', r.relname);
  END LOOP;
  FOR r IN SELECT relname FROM dbtest_seed.tables LOOP
    IF dbtest_seed.has_rows(r.relname) THEN
      EXECUTE format('CREATE TABLE dbtest_seed.%I AS SELECT * FROM public.%I', 'rows_' || r.relname, r.relname);
      UPDATE dbtest_seed.tables SET seeded = dbtest_seed.rows_hash(r.relname) WHERE relname = r.relname;
    END IF;
  END LOOP;
  FOR r IN SELECT relname FROM dbtest_seed.tables WHERE forced LOOP
    EXECUTE format('ALTER TABLE public.%I FORCE ROW LEVEL SECURITY', r.relname);
  END LOOP;
  LOOP
    UPDATE dbtest_seed.tables p SET rank = x.rank FROM (
      SELECT f.parent, max(c.rank) + 1 AS rank FROM dbtest_seed.refs f JOIN dbtest_seed.tables c ON c.relname = f.child GROUP BY f.parent
    ) x WHERE p.relname = x.parent AND p.rank < x.rank;
    EXIT WHEN NOT FOUND;
    n := n + 1;
    IF n > (SELECT count(*) FROM dbtest_seed.tables) THEN
      SELECT string_agg(relname, ', ' ORDER BY relname) INTO cycle FROM dbtest_seed.tables WHERE rank >= n;
      RAISE EXCEPTION 'dbtest: the foreign keys among % form a cycle: reset cannot order its deletes (teach backend/dbtest about it)', cycle;
    END IF;
  END LOOP;
END $$;

CREATE FUNCTION dbtest_seed.reset() RETURNS void LANGUAGE plpgsql AS $$
DECLARE r record; examined text[] := '{}'; dirty text[] := '{}'; cols text; tg text;
BEGIN
  -- A plain table with no page has no row: only the others are looked at
  -- (lifting a policy and planning a query cost about 1 ms a table).
  FOR r IN SELECT t.relname, t.forced, t.seeded FROM dbtest_seed.tables t
           WHERE t.seeded IS NOT NULL OR t.relkind <> 'r' OR pg_relation_size(format('public.%I', t.relname)) > 0 LOOP
    examined := examined || r.relname;
    IF r.forced THEN
      EXECUTE format('ALTER TABLE public.%I NO FORCE ROW LEVEL SECURITY', r.relname);
    END IF;
    IF (r.seeded IS NULL AND dbtest_seed.has_rows(r.relname)) OR (r.seeded IS NOT NULL AND dbtest_seed.rows_hash(r.relname) <> r.seeded) THEN
      dirty := dirty || r.relname;
    END IF;
  END LOOP;
  WITH RECURSIVE d(relname) AS (
    SELECT unnest(dirty) UNION SELECT f.child FROM dbtest_seed.refs f JOIN d ON d.relname = f.parent)
  SELECT coalesce(array_agg(d.relname), '{}') INTO dirty FROM d WHERE d.relname = ANY (examined);
  FOR r IN SELECT t.relname, t.triggers FROM dbtest_seed.tables t WHERE t.relname = ANY (dirty) ORDER BY t.rank LOOP
    FOREACH tg IN ARRAY r.triggers LOOP
      EXECUTE format('ALTER TABLE public.%I DISABLE TRIGGER %I', r.relname, tg);
    END LOOP;
    -- A big table (with its indexes and TOAST) is truncated: deleting its
    -- rows would leave every later claim scanning their dead pages, and its
    -- indexes full of them (a bloated HNSW index turns the planner away).
    IF pg_total_relation_size(format('public.%I', r.relname)) > 1048576 THEN
      EXECUTE format('TRUNCATE public.%I CASCADE', r.relname);
    ELSE
      EXECUTE format('DELETE FROM public.%I', r.relname);
    END IF;
  END LOOP;
  FOR r IN SELECT t.relname FROM dbtest_seed.tables t WHERE t.relname = ANY (dirty) AND t.seeded IS NOT NULL ORDER BY t.rank DESC LOOP
    SELECT string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum) INTO cols
    FROM pg_attribute a
    WHERE a.attrelid = format('public.%I', r.relname)::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';
    EXECUTE format('INSERT INTO public.%I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM dbtest_seed.%I', r.relname, cols, cols, 'rows_' || r.relname);
  END LOOP;
  FOR r IN SELECT t.relname, t.triggers FROM dbtest_seed.tables t WHERE t.relname = ANY (dirty) LOOP
    FOREACH tg IN ARRAY r.triggers LOOP
      EXECUTE format('ALTER TABLE public.%I ENABLE TRIGGER %I', r.relname, tg);
    END LOOP;
  END LOOP;
  FOR r IN SELECT t.relname FROM dbtest_seed.tables t WHERE t.forced AND t.relname = ANY (examined) LOOP
    EXECUTE format('ALTER TABLE public.%I FORCE ROW LEVEL SECURITY', r.relname);
  END LOOP;
  PERFORM CASE WHEN s.last_value IS NULL THEN setval(format('public.%I', s.sequencename), s.start_value, false)
               ELSE setval(format('public.%I', s.sequencename), s.last_value) END
  FROM dbtest_seed.sequences s JOIN pg_sequences p ON p.schemaname = 'public' AND p.sequencename = s.sequencename
  WHERE p.last_value IS DISTINCT FROM s.last_value;
END
$$;
`

// migrateTemplate migrates the database at u and installs dbtest_seed.
func migrateTemplate(ctx context.Context, u string) error {
	if _, err := db.Migrate(ctx, u); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, seedSQL)
	return err
}

// dropStalePools drops the pooled databases of other templates (an earlier
// migration set) that no test holds.
func dropStalePools(ctx context.Context, admin *pgx.Conn, tpl string) {
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'parley\\_pool\\_%' AND datname NOT LIKE $1",
		"parley_pool_"+strings.TrimPrefix(tpl, "parley_tpl_")+"_%")
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		var mine bool
		if admin.QueryRow(ctx, tryLockSQL, name).Scan(&mine) != nil || !mine {
			continue
		}
		_ = dropDatabase(ctx, admin, name)
		_, _ = admin.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", name)
	}
}

func newName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "parley_test_" + hex.EncodeToString(b[:])
}

// NewPool is New with a pool on the new database, closed when t ends.
func NewPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	u := New(t)
	pool, err := db.Open(context.Background(), u, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, u
}

// templateName depends on the migrations' contents, so a changed migration
// gets a new template.
func templateName(t testing.TB) string {
	h := sha256.New()
	h.Write([]byte(seedSQL))
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return "parley_tpl_" + hex.EncodeToString(h.Sum(nil))[:16]
}

func withDB(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + name
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the test database"
	}
	return u.Redacted()
}

// Migrations is goose's provider of the migrations over the database at
// url, for a test that runs them one by one (down, up to a version); its
// connection is closed when t ends.
func Migrations(t testing.TB, url string) *goose.Provider {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	sqldb := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { sqldb.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, sqldb, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// NewEmpty creates an empty database (no migrations) for t, dropped when t
// ends, and returns its URL.
func NewEmpty(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	defer admin.Close(ctx)
	name := newName()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { drop(t, name) })
	return withDB(AdminURL(), name)
}

func drop(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Errorf("dbtest: dropping %s: %v", name, err)
		return
	}
	defer conn.Close(ctx)
	if err := dropDatabase(ctx, conn, name); err != nil {
		t.Errorf("dbtest: dropping %s: %v", name, err)
	}
}
