package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/testenv"
)

// Two instances write the last use of the same keys at once (at a shutdown
// of both, each flushes at its end), each batch in its own order (a map's):
// neither fails. The rows were locked in each batch's order, the orders
// crossed, and Postgres broke the deadlock by failing one flush, whose
// times were lost.
func TestLastUseFlushesOfTwoInstancesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	one := testenv.New(t)
	two := testenv.NewOn(t, one.DBURL)
	org := one.A.ID
	var keys []string
	for i := range 200 {
		k, err := account.CreateKey(ctx, one.App.Store, org, fmt.Sprint("key ", i), "", []string{"chat"})
		require.NoError(t, err)
		keys = append(keys, k)
	}
	envs := []*testenv.Env{one, two}
	for range 10 {
		for _, e := range envs {
			for _, k := range keys {
				_, err := e.App.Auth.Authenticate(ctx, "Bearer "+k)
				require.NoError(t, err)
			}
		}
		errs := make([]error, len(envs))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, e := range envs {
			wg.Go(func() {
				<-start
				errs[i] = e.App.Auth.FlushLastUsed(ctx)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "instance %d's flush", i+1)
		}
	}
	var used int
	require.NoError(t, one.App.Store.Tenant(ctx, org, func(q *dbq.Queries) error {
		rows, err := q.ListAPIKeys(ctx, org)
		for _, r := range rows {
			if r.LastUsedAt != nil && time.Since(*r.LastUsedAt) < time.Hour {
				used++
			}
		}
		return err
	}))
	require.Equal(t, len(keys), used, "every key's last use is written")
}
