package auth_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/auth"
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
