package server

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clientAddr sets r.RemoteAddr to the client's address when the request
// came through a trusted reverse proxy, so that everything that reads the
// peer (public agents' per-IP limits, Connect's Peer, the logs) sees the
// client rather than the proxy.
//
// The client is found from the right of X-Forwarded-For: each proxy
// appends the address it got the request from, so the rightmost address not
// of a trusted proxy is the first one no trusted party vouches for: that is
// the client. Addresses to its left were written by the client itself and
// are ignored (a client cannot choose its limit bucket by sending the
// header). Without trusted proxies, or from a peer that is not one, the
// header is ignored.
func clientAddr(trusted []netip.Prefix, next http.Handler) http.Handler {
	if len(trusted) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if client, ok := forwardedClient(trusted, r.RemoteAddr, r.Header.Values("X-Forwarded-For")); ok {
			r = r.WithContext(r.Context()) // a copy: the caller's request is not changed
			r.RemoteAddr = net.JoinHostPort(client.String(), "0")
		}
		next.ServeHTTP(w, r)
	})
}

// forwardedClient returns the client's address by the rule of clientAddr,
// and false when the peer is not a trusted proxy or the header names none.
func forwardedClient(trusted []netip.Prefix, peer string, xff []string) (netip.Addr, bool) {
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		host = peer
	}
	p, err := netip.ParseAddr(host)
	if err != nil || !isTrusted(p.Unmap()) {
		return netip.Addr{}, false
	}
	var hops []string
	for _, v := range xff {
		hops = append(hops, strings.Split(v, ",")...)
	}
	var client netip.Addr
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := hopAddr(strings.TrimSpace(hops[i]))
		if !ok {
			// Garbage (or "unknown"): nothing to its left can be believed;
			// the nearest address before it stands.
			break
		}
		client = a.Unmap()
		if !isTrusted(client) {
			break
		}
	}
	return client, client.IsValid()
}

// hopAddr reads one X-Forwarded-For entry: an address, or an address with
// its port ("203.0.113.1:51234", "[2001:db8::7]:51234"), as some proxies
// (Azure's Application Gateway) write them. Read as garbage, such an entry
// made the proxy itself the client, and every visitor behind it shared one
// per-address limit.
func hopAddr(hop string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(hop); err == nil {
		return a, true
	}
	ap, err := netip.ParseAddrPort(hop)
	return ap.Addr(), err == nil
}
