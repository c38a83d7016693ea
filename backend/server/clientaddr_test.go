package server

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestForwardedClient(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	for _, c := range []struct {
		name, peer string
		xff        []string
		want       string // "" for: the peer stays the client
	}{
		{"no header", "10.0.0.5:4000", nil, ""},
		{"untrusted peer: the header is ignored", "198.51.100.9:4000", []string{"203.0.113.1"}, ""},
		{"one proxy", "10.0.0.5:4000", []string{"203.0.113.1"}, "203.0.113.1"},
		{"IPv6 loopback proxy", "[::1]:4000", []string{"2001:db8::7"}, "2001:db8::7"},
		{"a spoofed left part is ignored", "10.0.0.5:4000", []string{"192.0.2.66, 203.0.113.1"}, "203.0.113.1"},
		{"two trusted proxies", "10.0.0.5:4000", []string{"203.0.113.1, 10.0.0.9"}, "203.0.113.1"},
		{"several headers are one list", "10.0.0.5:4000", []string{"192.0.2.66", "203.0.113.1, 10.0.0.9"}, "203.0.113.1"},
		{"all trusted: the leftmost", "10.0.0.5:4000", []string{"10.1.1.1, 10.0.0.9"}, "10.1.1.1"},
		{"garbage stops the walk", "10.0.0.5:4000", []string{"203.0.113.1, unknown, 10.0.0.9"}, "10.0.0.9"},
		{"garbage only", "10.0.0.5:4000", []string{"unknown"}, ""},
		{"IPv4-mapped", "10.0.0.5:4000", []string{"::ffff:203.0.113.1"}, "203.0.113.1"},
		{"peer without a port", "10.0.0.5", []string{"203.0.113.1"}, "203.0.113.1"},
		{"entries with ports", "10.0.0.5:4000", []string{"192.0.2.66:1, 203.0.113.1:51234"}, "203.0.113.1"},
		{"IPv6 entry with a port", "10.0.0.5:4000", []string{"[2001:db8::7]:51234, 10.0.0.9:80"}, "2001:db8::7"},
		{"a bare IPv6 entry is not read as one with a port", "10.0.0.5:4000", []string{"2001:db8::7:80"}, "2001:db8::7:80"},
	} {
		got, ok := forwardedClient(trusted, c.peer, c.xff)
		if c.want == "" {
			require.False(t, ok, c.name)
			continue
		}
		require.True(t, ok, c.name)
		require.Equal(t, c.want, got.String(), c.name)
	}
}
