package chat

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/apperr"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/netguard"
)

// The attachments' budget: room is taken and given back by the byte, a turn
// past it waits and is refused with 503 OVERLOADED once its wait is over,
// and one whose client goes away or whose server drains leaves the line.
func TestLimitAttachments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := NewTurnQueue(10, 10).LimitAttachments(10)
	first, err := q.holdBytes(ctx, nil, 0, 6)
	require.NoError(t, err)

	_, err = q.holdBytes(ctx, nil, 30*time.Millisecond, 6)
	require.Equal(t, apperr.Overloaded, apperr.CodeOf(err), "%v", err)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = q.holdBytes(gone, nil, 0, 6)
	require.ErrorIs(t, err, context.Canceled)
	drain, drained := context.WithCancel(ctx)
	drained()
	_, err = q.holdBytes(ctx, drain, 0, 6)
	require.ErrorIs(t, err, errShuttingDown)

	first.keep(2) // 4 bytes back
	second, err := q.holdBytes(ctx, nil, 30*time.Millisecond, 8)
	require.NoError(t, err)
	require.False(t, q.attachmentBytes.TryAcquire(1), "2 + 8 of 10 held")
	first.release()
	second.release()
	second.release() // twice: nothing more
	require.True(t, q.attachmentBytes.TryAcquire(10), "all given back")

	var unbounded *TurnQueue
	h, err := unbounded.holdBytes(ctx, nil, 0, 1<<40)
	require.NoError(t, err)
	h.release()
}

// A turn's attachments hold AttachmentMaxBytes each while read; its images
// keep their size until the turn ends, its documents nothing.
func TestReadAttachmentsHoldsImageBytes(t *testing.T) {
	t.Parallel()
	png, err := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
	require.NoError(t, err)
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/a.png":
			_, _ = w.Write(png)
		case "/notes.txt":
			_, _ = w.Write([]byte("Order 4417 shipped."))
		default:
			http.NotFound(w, r)
		}
	}))
	defer files.Close()
	s := &Service{
		Fetch: NewAttachmentFetcher(netguard.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}),
		Queue: NewTurnQueue(10, 10).LimitAttachments(AttachmentsInFlight),
	}
	budget := s.Queue.attachmentBytes
	atts := []*parleyv1.Attachment{{Url: files.URL + "/a.png", Type: "image/png"}, {Url: files.URL + "/notes.txt"}}
	text, images, held, err := s.readAttachments(context.Background(), atts, &turn{})
	require.NoError(t, err)
	require.Contains(t, text.text(attachmentTokens), "Order 4417 shipped.")
	require.Len(t, images, 1)
	require.Equal(t, int64(len(png)), held.n)
	require.False(t, budget.TryAcquire(AttachmentsInFlight-int64(len(png))+1), "the image's bytes are held")
	held.release()
	require.True(t, budget.TryAcquire(AttachmentsInFlight), "all given back")
	budget.Release(AttachmentsInFlight)

	// A failed read gives everything back.
	_, _, _, err = s.readAttachments(context.Background(), append(atts, &parleyv1.Attachment{Url: files.URL + "/missing.txt"}), &turn{})
	require.Error(t, err)
	require.True(t, budget.TryAcquire(AttachmentsInFlight), "all given back")
}
