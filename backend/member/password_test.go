package member_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/member"
)

// Password checks take turns: while every hashing slot is taken (a flood of
// sign-ins, each argon2id check holding 19 MiB), one more waits for a slot
// instead of running beside them, and gives up when its request ends, not
// even a right password matching. Sign-ins at once used to hold 19 MiB
// each, 1.1 GiB for the 60 one address may send in a minute.
func TestPasswordChecksWaitForASlot(t *testing.T) {
	const password = "a long and rare passphrase"
	hash, err := member.HashPassword(context.Background(), password)
	require.NoError(t, err)

	t.Run("held", func(t *testing.T) {
		member.HoldHashing(t)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		var ok bool
		n := allocated(func() { ok, err = member.CheckPassword(ctx, hash, password) })
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, ok)
		require.Less(t, n, uint64(argonBytes), "an argon2id check ran while every slot was taken")

		_, err = member.HashPassword(ctx, password)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})

	// Once the slots are free again, the same check runs.
	ok, err := member.CheckPassword(context.Background(), hash, password)
	require.NoError(t, err)
	require.True(t, ok)
}
