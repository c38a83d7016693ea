// Package netguard is the only HTTP client Parley uses for URLs that users
// give (web pages, sites, sitemaps, agents' http_request endpoints). It allows public addresses only,
// checked on the address actually dialled (so DNS tricks and rebinding
// fail), re-checks every redirect, and caps response size and time.
//
// It must never dial a loopback, private, link-local, multicast or
// unspecified address, nor a cloud metadata address, unless an operator
// allowed that range by configuration.
package netguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrBlocked is returned for a destination the guard refuses.
var ErrBlocked = errors.New("destination not allowed")

// errRedirects ends a request redirected too many times.
var errRedirects = errors.New("redirects")

// TooManyRedirects reports whether err ended a request redirected more
// than MaxRedirects times.
func TooManyRedirects(err error) bool { return errors.Is(err, errRedirects) }

// errDialBlocked refuses a dial: the address is not named, since the
// caller may have named a host whose address is not theirs to learn.
var errDialBlocked = fmt.Errorf("%w: not a public address", ErrBlocked)

// Config bounds what the client may reach and read.
type Config struct {
	// Allow lists address ranges an operator opened despite being private
	// (intranet documents, or tests' loopback servers). Default: none.
	Allow []netip.Prefix
	// Timeout bounds one request, redirects included. Default 20 s.
	Timeout time.Duration
	// MaxBytes bounds a response body. Default 10 MiB.
	MaxBytes int64
	// MaxRedirects. Default 5.
	MaxRedirects int
	// NoRedirects answers a redirect as the response itself, unfollowed
	// (webhook deliveries: a 3xx is not a 2xx; http_request: its
	// configured headers must reach no other host).
	NoRedirects bool
}

// maxHeaderBytes bounds a response's headers, as net/http's server bounds
// a request's (http.DefaultMaxHeaderBytes).
const maxHeaderBytes = 1 << 20

// Client fetches user-given URLs.
type Client struct {
	cfg  Config
	http *http.Client
}

// New returns a guarded client.
func New(cfg Config) *Client {
	if cfg.Timeout == 0 {
		cfg.Timeout = 20 * time.Second
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 10 << 20
	}
	if cfg.MaxRedirects == 0 {
		cfg.MaxRedirects = 5
	}
	c := &Client{cfg: cfg}
	dialer := &net.Dialer{
		Timeout: 10 * time.Second,
		// Control runs on the resolved address, just before connecting: the
		// check cannot be raced by a second DNS answer.
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s", ErrBlocked, address)
			}
			if !c.Allowed(ap.Addr()) {
				return errDialBlocked
			}
			return nil
		},
	}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, unchecked
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 15 * time.Second,
		// MaxBytes bounds the body only: without this, Go reads up to 10
		// MiB of a response's headers, whatever MaxBytes says.
		MaxResponseHeaderBytes: maxHeaderBytes,
		MaxIdleConns:           10,
		IdleConnTimeout:        30 * time.Second,
	}
	c.http = &http.Client{
		Transport: tr,
		Timeout:   cfg.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if cfg.NoRedirects {
				return http.ErrUseLastResponse
			}
			if len(via) >= cfg.MaxRedirects {
				return fmt.Errorf("more than %d %w", cfg.MaxRedirects, errRedirects)
			}
			return CheckURL(req.URL)
		},
	}
	return c
}

// Limited is c reading at most n bytes of a response body (and never more
// than c itself reads): the same guard, transport, timeout and redirect
// rules, for a response that must be smaller than a page (robots.txt).
func (c *Client) Limited(n int64) *Client {
	l := *c
	l.cfg.MaxBytes = min(n, c.cfg.MaxBytes)
	return &l
}

// CheckURL refuses what the guard never fetches, before any lookup: schemes
// other than http and https, URLs with credentials, and ports outside 1 to
// 65535 (url.Parse checks only that a port is digits).
func CheckURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: only http and https URLs are fetched, not %q", ErrBlocked, u.Scheme)
	}
	if u.User != nil {
		return fmt.Errorf("%w: URLs with credentials are not fetched", ErrBlocked)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%w: the URL has no host", ErrBlocked)
	}
	// An empty port ("https://example.com:/") is the scheme's default.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: port %s is not a port from 1 to 65535", ErrBlocked, p)
		}
	}
	// Numeric hosts in the old inet_aton notations (127.1, 2130706433,
	// 0x7f000001, 0177.0.0.1) name addresses without DNS in some resolvers:
	// only the standard forms are accepted, and checked like any address.
	if _, err := netip.ParseAddr(host); err != nil && looksNumeric(host) {
		return fmt.Errorf("%w: %q is an address in a non-standard notation", ErrBlocked, host)
	}
	return nil
}

func looksNumeric(host string) bool {
	if host[0] < '0' || host[0] > '9' {
		return false
	}
	for _, r := range strings.ToLower(host) {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r == 'x' || r == '.') {
			return false
		}
	}
	return true
}

// blocked are ranges outside the standard library's private, loopback,
// link-local, multicast and unspecified classes that must not be reached
// either: "this network" (0.0.0.0/8, which Linux routes to the host itself),
// cloud instance metadata, carrier-grade NAT, IETF protocol assignments,
// benchmarking, reserved and broadcast space, deprecated site-local IPv6,
// and local-use NAT64 whose embedding cannot be read back.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT, also used by some clouds
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"), // reserved, and 255.255.255.255
	netip.MustParsePrefix("fec0::/10"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// Forms of IPv6 address that carry an IPv4 address a packet may end up at.
var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
	teredo = netip.MustParsePrefix("2001::/32")
)

// embeddedV4 returns the IPv4 addresses an IPv6 address a leads to, for the
// forms that embed one: IPv4-compatible (::a.b.c.d), NAT64, 6to4, and
// Teredo (its server, and its client, stored inverted).
func embeddedV4(a netip.Addr) []netip.Addr {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	v4 := func(x []byte) netip.Addr { return netip.AddrFrom4([4]byte{x[0], x[1], x[2], x[3]}) }
	switch {
	case [12]byte(b[:12]) == [12]byte{}:
		return []netip.Addr{v4(b[12:])}
	case nat64.Contains(a):
		return []netip.Addr{v4(b[12:])}
	case sixTo4.Contains(a):
		return []netip.Addr{v4(b[2:6])}
	case teredo.Contains(a):
		client := [4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff}
		return []netip.Addr{v4(b[4:8]), netip.AddrFrom4(client)}
	}
	return nil
}

// Allowed reports whether the guard may connect to a: a public unicast
// address (or one the configuration opens), and for IPv6 forms that embed
// an IPv4 address, that address too.
func (c *Client) Allowed(a netip.Addr) bool {
	// SECURITY: the zone ("%eth0", which a URL's host may carry and the
	// dialled address keeps) is dropped: it does not change where a packet
	// to a global address goes, and netip.Prefix.Contains is false for any
	// zoned address, so that "64:ff9b::a9fe:a9fe%eth0" passed the NAT64,
	// 6to4, Teredo and blocked-range checks.
	a = a.Unmap().WithZone("")
	for _, p := range c.cfg.Allow {
		if p.Contains(a) {
			return true
		}
	}
	if !public(a) {
		return false
	}
	for _, v4 := range embeddedV4(a) {
		if !c.Allowed(v4) {
			return false
		}
	}
	return true
}

func public(a netip.Addr) bool {
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range blocked {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// Page is a fetched response.
type Page struct {
	URL         *url.URL // after redirects
	ContentType string
	Body        []byte
}

// Get fetches a URL, reading at most MaxBytes of it.
func (c *Client) Get(ctx context.Context, raw string) (*Page, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid URL: %w", err)
	}
	if err := CheckURL(u); err != nil {
		return nil, err
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil && !c.Allowed(a) {
		return nil, fmt.Errorf("%w: %s is not a public address", ErrBlocked, a)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "Parley/1.0 (+https://github.com/parleyhq/parley)")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, unreached(u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, &StatusError{Host: u.Host, Code: resp.StatusCode, Status: resp.Status}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxBytes+1))
	if err != nil {
		return nil, unfinished(resp.Request.URL, err)
	}
	if int64(len(body)) > c.cfg.MaxBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", u, c.cfg.MaxBytes)
	}
	return &Page{URL: resp.Request.URL, ContentType: resp.Header.Get("Content-Type"), Body: body}, nil
}

// Request is a request the guard sends for a caller that chose its method,
// headers and body (http_request's endpoints).
type Request struct {
	Method, URL string
	Header      http.Header
	Body        []byte
}

// Response is what a Request got, whatever its status.
type Response struct {
	Status int
	Header http.Header
	// Body is at most MaxBytes of the body.
	Body []byte
	// Truncated: the body was longer; the rest was not read.
	Truncated bool
}

// Send sends r through the guard and returns the response whatever its
// status, with at most MaxBytes of its body (a longer body is cut, not an
// error).
func (c *Client) Send(ctx context.Context, r Request) (*Response, error) {
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, fmt.Errorf("invalid URL: %w", err)
	}
	if err := CheckURL(u); err != nil {
		return nil, err
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil && !c.Allowed(a) {
		return nil, fmt.Errorf("%w: %s is not a public address", ErrBlocked, a)
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		req.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "Parley/1.0 (+https://github.com/parleyhq/parley)")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, unreached(u, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxBytes+1))
	if err != nil {
		return nil, unfinished(resp.Request.URL, err)
	}
	out := &Response{Status: resp.StatusCode, Header: resp.Header, Body: got}
	if int64(len(got)) > c.cfg.MaxBytes {
		out.Body, out.Truncated = got[:c.cfg.MaxBytes], true
	}
	return out, nil
}

// notPublic says that host (a name or an address, with or without a
// port) is not one the guard reaches.
func notPublic(host string) string {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return host + " is not a public address"
	}
	return host + " does not resolve to a public address"
}

// CheckDestination refuses, before any request is sent, a URL the guard
// would refuse to fetch: what CheckURL refuses, a host that is an address
// the guard may not reach, and localhost (RFC 6761: always loopback).
// Other names are not resolved here.
//
// SECURITY: whether a name resolves, and to what, is not the saver's to
// learn. Resolving it here refused a name of a private address (400) and
// saved one that resolves nowhere (200), so that any organization's admin
// could map the names inside the operator's network one update at a time.
// The check when each request connects applies to whatever a name resolves
// to then, as it must anyway (a name may resolve elsewhere by then), and
// its refusal reads the same for both (unreached).
func (c *Client) CheckDestination(_ context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("invalid URL: %w", err)
	}
	if err := CheckURL(u); err != nil {
		return err
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if !c.Allowed(a) {
			return fmt.Errorf("%w: %s is not a public address", ErrBlocked, a)
		}
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if (name == "localhost" || strings.HasSuffix(name, ".localhost")) &&
		!c.Allowed(netip.AddrFrom4([4]byte{127, 0, 0, 1})) && !c.Allowed(netip.IPv6Loopback()) {
		return fmt.Errorf("%w: %s is this machine (loopback), not a public address", ErrBlocked, host)
	}
	return nil
}

// Blocked reports whether err is the guard's refusal.
func Blocked(err error) bool {
	return errors.Is(err, ErrBlocked) || strings.Contains(fmt.Sprint(err), ErrBlocked.Error())
}

// StatusError is a response of status 400 or more, which Get returns
// instead of its body.
type StatusError struct {
	Host   string
	Code   int    // 503
	Status string // "503 Service Unavailable"
}

func (e *StatusError) Error() string { return e.Host + " answered " + e.Status }

// Reason is what a caller may be told of err, a fetch's failure: the
// site's answer (StatusError) or why no answer came (unreached's words,
// which name neither an address nor a port), and false for any other
// error, which says nothing a caller should read.
func Reason(err error) (string, bool) {
	var status *StatusError
	if errors.As(err, &status) {
		return status.Error(), true
	}
	var un *unreachedError
	if errors.As(err, &un) {
		return un.msg, true
	}
	return "", false
}

// unreachedError is a request that got no response, as its caller may
// read it: what went wrong, not where the connection went. The cause stays
// wrapped for errors.Is and errors.As.
type unreachedError struct {
	msg string
	err error
}

func (e *unreachedError) Error() string { return e.msg }
func (e *unreachedError) Unwrap() error { return e.err }

// unreached words the error of a request to u that got no response.
// SECURITY: Go's error names the address a host name resolved to and the
// port it tried ("dial tcp 10.0.3.7:8443: connect: connection refused"):
// an intranet's names and its open ports, to a caller whose URL (a chat
// attachment, on a public agent anyone's) should learn neither.
func unreached(u *url.URL, err error) error {
	host := u.Host
	var ue *url.Error
	if errors.As(err, &ue) {
		if v, perr := url.Parse(ue.URL); perr == nil && v.Host != "" {
			host = v.Host // a redirect's target, where it failed
		}
	}
	var dnsErr *net.DNSError
	var msg string
	switch {
	case errors.Is(err, errDialBlocked), errors.As(err, &dnsErr):
		// SECURITY: the same words whether the name resolves to a private
		// address or to none: a caller (a public agent's visitor naming an
		// attachment) cannot list the names that exist inside the network.
		msg = notPublic(host)
	case ue != nil && (Blocked(ue.Err) || errors.Is(ue.Err, errRedirects)):
		msg = ue.Err.Error() // a redirect CheckRedirect refused, in its own words
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded), ue != nil && ue.Timeout():
		msg = host + " did not answer in time"
	case errors.Is(err, syscall.ECONNREFUSED):
		msg = host + " refused the connection"
	default:
		msg = host + " could not be reached"
	}
	return &unreachedError{msg: msg, err: err}
}

// unfinished words the error of reading the body of a response from u, as
// unreached words one that got none. SECURITY: Go's names both ends'
// addresses and ports ("read tcp 10.0.3.7:8443->10.0.0.2:41312: connection
// reset by peer"), which a caller must not learn either.
func unfinished(u *url.URL, err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return &unreachedError{msg: u.Host + " did not send its response in time", err: err}
	}
	return &unreachedError{msg: u.Host + " broke off its response", err: err}
}
