package chat

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// With one place for loads: a second load waits until the first is done, a
// load whose client goes away leaves the line, and a queue without the
// bound lets every load through.
func TestLimitLoads(t *testing.T) {
	t.Parallel()
	q := NewTurnQueue(10, 10).LimitLoads(1)
	ctx := context.Background()
	first, err := q.acquireLoad(ctx)
	require.NoError(t, err)

	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = q.acquireLoad(gone)
	require.ErrorIs(t, err, context.Canceled, "a load waiting for a place leaves when its client goes")

	got := make(chan func(), 1)
	go func() {
		release, err := q.acquireLoad(ctx)
		if err == nil {
			got <- release
		}
	}()
	select {
	case <-got:
		t.Fatal("a second load ran beside the first")
	default:
	}
	first()
	(<-got)()

	var unbounded *TurnQueue
	for range 3 {
		release, err := unbounded.acquireLoad(ctx)
		require.NoError(t, err)
		defer release()
	}
	q = NewTurnQueue(10, 10)
	for range 3 {
		release, err := q.acquireLoad(ctx)
		require.NoError(t, err)
		defer release()
	}
}
