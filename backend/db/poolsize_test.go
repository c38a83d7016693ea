package db_test

import (
	"context"
	"math"
	neturl "net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/dbtest"
)

// The pool's size: the flag's when given, else the URL's pool_max_conns
// (in either form of connection string), else the default. A URL's own
// size was overridden by the default once.
func TestPoolSize(t *testing.T) {
	for _, tc := range []struct {
		url        string
		configured int
		want       int
	}{
		{"postgres://u@h/d", 0, db.DefaultMaxConns},
		{"postgres://u@h/d", 5, 5},
		{"postgres://u@h/d", math.MaxInt, math.MaxInt32}, // pgx's bound
		{"postgres://u@h/d?pool_max_conns=7", 0, 7},
		{"postgres://u@h/d?sslmode=disable&pool_max_conns=40", 0, 40},
		{"postgres://u@h/d?pool_max_conns=7", 3, 3},
		{"host=h user=u dbname=d pool_max_conns=9", 0, 9},
		{"postgres://u@h/d?pool_max_conns=many", 0, db.DefaultMaxConns}, // Open reports it
	} {
		require.Equal(t, tc.want, db.PoolSize(tc.url, tc.configured), "%s, configured %d", tc.url, tc.configured)
	}
}

func TestOpenKeepsTheURLsPoolSize(t *testing.T) {
	t.Parallel()
	_, url := dbtest.NewPool(t)
	with := func(v string) string {
		u, err := neturl.Parse(url)
		require.NoError(t, err)
		q := u.Query()
		q.Set("pool_max_conns", v)
		u.RawQuery = q.Encode()
		return u.String()
	}
	pool, err := db.Open(context.Background(), with("3"), 0, nil)
	require.NoError(t, err)
	defer pool.Close()
	require.EqualValues(t, 3, pool.Config().MaxConns)

	_, err = db.Open(context.Background(), with("many"), 0, nil)
	require.ErrorContains(t, err, "pool_max_conns")
}
