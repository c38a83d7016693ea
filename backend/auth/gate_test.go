package auth_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/apperr"
	"github.com/parleyhq/parley/backend/auth"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/ratelimit"
)

// Addresses are counted per IPv4 address and per IPv6 /64: the addresses
// of one /64 share a limit, as an IPv4-mapped address does with its IPv4.
func TestAddressKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
	} {
		require.Equal(t, auth.AddressKey(tc.a), auth.AddressKey(tc.b), "%s and %s", tc.a, tc.b)
	}
	for _, tc := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:3::1"},
		{"192.0.2.7", "192.0.2.8"},
	} {
		require.NotEqual(t, auth.AddressKey(tc.a), auth.AddressKey(tc.b), "%s and %s", tc.a, tc.b)
	}
	require.Equal(t, "not an address", auth.AddressKey("not an address"))
}

// A caller without a key is counted by its address first, and by the
// visitor id it names only once the address is admitted: a new id on every
// request from an address past its limit makes no window for the limiter
// to keep (each id counted made two, a day's kept for a day).
func TestAdmitVisitorCountsTheAddressFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := &auth.Gate{Limits: ratelimit.NewMemory()}
	res, lim := uuid.New(), plan.Limits{PerMinute: 2, PerDay: 100}
	for _, v := range []string{"v1", "v2"} {
		_, err := g.AdmitVisitor(ctx, res, v, "192.0.2.7", "free", lim)
		require.NoError(t, err)
	}
	for i := range 5 {
		v := fmt.Sprintf("new-%d", i)
		_, err := g.AdmitVisitor(ctx, res, v, "192.0.2.7", "free", lim)
		require.Equal(t, apperr.RateLimited, apperr.CodeOf(err), "%v", err)
		u, err := g.Limits.Peek(ctx, "pub:"+res.String()+":v:"+v, lim)
		require.NoError(t, err)
		require.Zero(t, u.Day, "visitor %s was counted though its address was refused", v)
	}
	// A visitor past its own limit is refused at another address too.
	_, err := g.AdmitVisitor(ctx, res, "v1", "192.0.2.8", "free", lim)
	require.NoError(t, err)
	_, err = g.AdmitVisitor(ctx, res, "v1", "192.0.2.9", "free", lim)
	require.Equal(t, apperr.RateLimited, apperr.CodeOf(err), "%v", err)
}

// An admitted caller without a key is told the remaining requests of the
// tighter of its windows: several visitors behind one address share the
// address's, and a visitor told its own (fresh) window's remaining was
// refused by the address's with requests "remaining".
func TestAdmitVisitorReportsTheTighterWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := &auth.Gate{Limits: ratelimit.NewMemory()}
	res, lim := uuid.New(), plan.Limits{PerMinute: 10, PerDay: 100}
	for range 6 {
		_, err := g.AdmitVisitor(ctx, res, "first", "192.0.2.7", "free", lim)
		require.NoError(t, err)
	}
	rate, err := g.AdmitVisitor(ctx, res, "second", "192.0.2.7", "free", lim)
	require.NoError(t, err)
	require.True(t, rate.Allowed)
	require.EqualValues(t, 3, rate.Remaining, "the address has 3 left; the visitor's own window 9")
	for i := range 3 {
		_, err := g.AdmitVisitor(ctx, res, "second", "192.0.2.7", "free", lim)
		require.NoError(t, err, "request %d of the 3 remaining", i+1)
	}
	_, err = g.AdmitVisitor(ctx, res, "second", "192.0.2.7", "free", lim)
	require.Equal(t, apperr.RateLimited, apperr.CodeOf(err))
}
