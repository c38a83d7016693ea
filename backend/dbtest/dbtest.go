// Package dbtest gives tests a fresh Postgres database each, cloned from a
// template that is migrated once per migration set. Tests need a Postgres
// with pgvector reachable at PARLEY_TEST_DATABASE_URL (default: the one
// scripts/db-setup.sh prepares) by a role with CREATEDB.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
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

// New creates a fresh, migrated database for t, dropped when t ends, and
// returns its URL.
func New(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("dbtest: connecting to %s (run scripts/db-setup.sh): %v", redact(AdminURL()), err)
	}
	defer admin.Close(ctx)

	tpl := templateName(t)
	if err := ensureTemplate(ctx, admin, tpl); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	name := newName()
	// Cloning needs no lock: a template exists only once fully migrated,
	// and Postgres lets any number of clones copy it at once.
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{tpl}.Sanitize())); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { drop(t, name) })
	return withDB(AdminURL(), name)
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
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return err
	}
	if _, err := db.Migrate(ctx, withDB(AdminURL(), building)); err != nil {
		_, _ = admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{building}.Sanitize())
		return fmt.Errorf("migrating template: %w", err)
	}
	_, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", pgx.Identifier{building}.Sanitize(), pgx.Identifier{tpl}.Sanitize()))
	return err
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
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("dbtest: dropping %s: %v", name, err)
	}
}
