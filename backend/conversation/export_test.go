package conversation

import (
	"context"

	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
)

// Flush is one read of the stream's events (Watch.flush).
func (w *Watch) Flush(ctx context.Context, send func(*parleyv1.WatchConversationResponse) error) (bool, error) {
	return w.flush(ctx, send)
}
