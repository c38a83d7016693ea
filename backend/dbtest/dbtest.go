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
// process at once. A claimed database is emptied first: its tables truncated
// and the rows the migrations seeded put back, its sequences set as the
// template had them (dbtest_seed.reset, installed in the template). One
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
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
	// The claim's connection holds the database's advisory lock until t
	// ends; advisory locks are per database, so every claim is made on the
	// admin database.
	claim, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("dbtest: connecting to %s (run scripts/db-setup.sh): %v", redact(AdminURL()), err)
	}
	t.Cleanup(func() { claim.Close(context.Background()) })

	tpl := templateName(t)
	if err := ensureTemplate(ctx, claim, tpl); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	name, err := claimPooled(ctx, claim, tpl)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	return withDB(AdminURL(), name)
}

// claimPooled locks the first free database of tpl's pool and makes it as
// the template is: emptied if it exists and still has the template's
// schema, cloned from the template otherwise.
func claimPooled(ctx context.Context, claim *pgx.Conn, tpl string) (string, error) {
	prefix := "parley_pool_" + strings.TrimPrefix(tpl, "parley_tpl_") + "_"
	for i := 0; i < 1000; i++ {
		name := prefix + strconv.Itoa(i)
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
// closing first any connection its last test left open.
func reset(ctx context.Context, claim *pgx.Conn, name string) error {
	if _, err := claim.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", name); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, withDB(AdminURL(), name))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
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

// seedSQL installs dbtest_seed in a migrated template: a copy of every
// table the migrations put rows in, the sequences' values, the schema's
// fingerprint, and reset, which puts a database cloned from the template
// back as it was.
const seedSQL = `
CREATE SCHEMA dbtest_seed;

CREATE FUNCTION dbtest_seed.fingerprint() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT md5(string_agg(c.relname || ':' || c.relkind::text || ':' || coalesce((
      SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ',' ORDER BY a.attnum)
      FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), ''), ';' ORDER BY c.relname))
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = 'public'
$$;

CREATE TABLE dbtest_seed.template AS SELECT dbtest_seed.fingerprint() AS fingerprint;
CREATE TABLE dbtest_seed.sequences AS
  SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = 'public' AND last_value IS NOT NULL;

DO $$
DECLARE r record; n bigint;
BEGIN
  FOR r IN SELECT c.relname FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
           WHERE ns.nspname = 'public' AND c.relkind IN ('r', 'p') LOOP
    EXECUTE format('SELECT count(*) FROM public.%I', r.relname) INTO n;
    IF n > 0 THEN
      EXECUTE format('CREATE TABLE dbtest_seed.%I AS SELECT * FROM public.%I', 'rows_' || r.relname, r.relname);
    END IF;
  END LOOP;
END $$;

CREATE FUNCTION dbtest_seed.reset() RETURNS void LANGUAGE plpgsql AS $$
DECLARE r record; tables text; cols text; forced boolean;
BEGIN
  SELECT string_agg(format('public.%I', c.relname), ', ') INTO tables
  FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
  WHERE ns.nspname = 'public' AND c.relkind IN ('r', 'p');
  EXECUTE 'TRUNCATE ' || tables || ' RESTART IDENTITY';
  FOR r IN SELECT substr(c.relname, 6) AS relname FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
           WHERE ns.nspname = 'dbtest_seed' AND c.relkind = 'r' AND c.relname LIKE 'rows\_%' LOOP
    SELECT string_agg(format('%I', a.attname), ', ' ORDER BY a.attnum) INTO cols
    FROM pg_attribute a
    WHERE a.attrelid = format('public.%I', r.relname)::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';
    -- The owner is held to a forced policy too (plans: only operators
    -- write); the seed goes back as the migrations wrote it, around it.
    SELECT c.relforcerowsecurity INTO forced FROM pg_class c WHERE c.oid = format('public.%I', r.relname)::regclass;
    IF forced THEN
      EXECUTE format('ALTER TABLE public.%I NO FORCE ROW LEVEL SECURITY', r.relname);
    END IF;
    EXECUTE format('INSERT INTO public.%I (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM dbtest_seed.%I', r.relname, cols, cols, 'rows_' || r.relname);
    IF forced THEN
      EXECUTE format('ALTER TABLE public.%I FORCE ROW LEVEL SECURITY', r.relname);
    END IF;
  END LOOP;
  PERFORM setval(format('public.%I', s.sequencename), s.last_value) FROM dbtest_seed.sequences s;
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
