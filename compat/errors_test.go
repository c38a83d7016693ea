package compat

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/reqinfo"
)

// A request whose client went away is logged as 499 CLIENT_CLOSED_REQUEST,
// not as the server's 500; a cancellation the client did not cause (the
// request still open) stays an internal error.
func TestClientGoneIsNotAServerError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	info := &reqinfo.Info{}
	r := httptest.NewRequest("POST", "/api/v2/agent/x/chat", nil).WithContext(reqinfo.With(ctx, info))
	cancel()
	status, body := errorFor(r, fmt.Errorf("persisting: %w", context.Canceled))
	require.Equal(t, 499, status)
	require.Equal(t, "CLIENT_CLOSED_REQUEST", body.Error.Code)
	require.Equal(t, "CLIENT_CLOSED_REQUEST", info.Code)
	require.Equal(t, 499, info.Status)

	open := httptest.NewRequest("POST", "/api/v2/agent/x/chat", nil)
	status, body = errorFor(open, context.Canceled)
	require.Equal(t, 500, status)
	require.Equal(t, "INTERNAL_ERROR", body.Error.Code)
}
