package conversation_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/conversation"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// A stream replaying a conversation of large messages (a visitor's, from
// Last-Event-ID 0) reads them a megabyte at a time, not a hundred at a
// time whatever their size, and still sends them all at once, read after
// read, without waiting for a heartbeat.
func TestReplayReadsBoundedBytes(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	svc := &conversation.Service{Store: s.db, Live: newHub(t, s.db.Pool, s.db), Heartbeat: time.Hour}
	big := strings.Repeat("x", 600_000)
	const n = 9
	for range n {
		s.say(t, "c1", big)
	}
	p, err := conversation.MemberParty(s.member, "ada@example.com")
	require.NoError(t, err)
	zero := int64(0)

	w, err := svc.Follow(ctx, p, "c1", &zero)
	require.NoError(t, err)
	var read int
	more, err := w.Flush(ctx, func(*parleyv1.WatchConversationResponse) error { read++; return nil })
	require.NoError(t, err)
	require.Equal(t, 2, read, "one read: the messages starting within its first megabyte")
	require.True(t, more)

	got := make(chan int64, n)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = w.Run(runCtx, func(ev *parleyv1.WatchConversationResponse) error {
			if ev.GetMessage() != nil {
				got <- ev.GetEventId()
			}
			return nil
		})
	}()
	for want := int64(read + 1); want <= n; want++ {
		select {
		case id := <-got:
			require.Equal(t, want, id)
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d not sent: the replay waited for a wake-up", want)
		}
	}
}
