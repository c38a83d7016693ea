package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WaitForLockWait waits up to 20 s until a statement of pool's database
// whose text holds like (any statement when like is empty) waits for a
// lock held by another transaction, and fails the test if none does. Race
// tests use it to let a transaction they hold open go only once the
// request racing it is blocked on it.
func WaitForLockWait(t testing.TB, pool *pgxpool.Pool, like string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, like).Scan(&n)
		if err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement %q waits for a lock after 20 s (last error: %v)", like, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
