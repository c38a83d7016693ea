package netguard

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Every private, loopback, metadata or odd-notation destination is refused,
// and the listening server never sees a connection.
func TestRefusesPrivateDestinations(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Write([]byte("secret"))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))

	c := New(Config{})
	for _, raw := range []string{
		"http://127.0.0.1:" + port,
		"http://127.1:" + port,
		"http://2130706433:" + port,
		"http://0x7f000001:" + port,
		"http://[::1]:" + port,
		"http://[::ffff:127.0.0.1]:" + port,
		"http://0.0.0.0:" + port,
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		"http://192.168.1.1/",
		"http://localhost:" + port, // a name that resolves to loopback
		"file:///etc/passwd",
		"gopher://127.0.0.1:" + port + "/",
		"http://user:pass@example.com/",
	} {
		_, err := c.Get(context.Background(), raw)
		if err == nil || !Blocked(err) {
			t.Errorf("%s: got %v, want a refusal", raw, err)
		}
	}
	if got := hits.Load(); got != 0 {
		t.Fatalf("the private server was reached %d times", got)
	}
}

func TestRedirectToPrivateIsRefused(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer target.Close()
	// The redirector listens on 127.0.0.2, the target on 127.0.0.1.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("listening on 127.0.0.2: %v", err)
	}
	redirector := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/internal", http.StatusFound)
	})}
	go redirector.Serve(ln) //nolint:errcheck
	defer redirector.Close()

	// Only the redirector's address is allowed, as if it were public.
	c := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}})
	_, err = c.Get(context.Background(), "http://"+ln.Addr().String()+"/")
	if err == nil || !Blocked(err) {
		t.Fatalf("got %v, want the redirect refused", err)
	}
	if hits.Load() != 0 {
		t.Fatal("the redirect target was reached")
	}
}

func TestCapsSize(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(strings.Repeat("x", 2000)))
	}))
	defer srv.Close()
	c := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, MaxBytes: 1000})
	if _, err := c.Get(context.Background(), srv.URL); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("got %v, want a size error", err)
	}
	c = New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, MaxBytes: 5000})
	p, err := c.Get(context.Background(), srv.URL)
	if err != nil || len(p.Body) != 2000 {
		t.Fatalf("allowed fetch: %v", err)
	}
}

func TestAllowedTable(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "1.1.1.1": true, "2606:4700:4700::1111": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.0.1": false,
		"169.254.169.254": false, "0.0.0.0": false, "::": false, "::ffff:10.0.0.1": false, "fc00::1": false,
		"fe80::1": false, "224.0.0.1": false, "100.100.100.200": false,
		// "This network" reaches the host itself on Linux.
		"0.0.0.1": false, "0.1.2.3": false,
		// IPv4-compatible and -mapped IPv6 forms of private addresses.
		"::7f00:1": false, "::127.0.0.1": false, "::a9fe:a9fe": false, "::ffff:127.0.0.1": false, "::ffff:169.254.169.254": false,
		"::8.8.8.8": true,
		// NAT64 (well-known and local-use prefixes).
		"64:ff9b::7f00:1": false, "64:ff9b::a00:1": false, "64:ff9b::a9fe:a9fe": false, "64:ff9b:1::a00:1": false,
		"64:ff9b::808:808": true,
		// 6to4 and Teredo carrying private addresses.
		"2002:7f00:1::1": false, "2002:a00:1::": false, "2002:c0a8:101::1": false, "2002:808:808::1": true,
		"2001:0:a00:1::1": false, "2001:0:808:808::80ff:fefe": false, "2001:0:808:808::f7f7:f7f7": true,
		// Reserved, broadcast, deprecated site-local.
		"240.0.0.1": false, "255.255.255.255": false, "fec0::1": false,
	} {
		if got := c.Allowed(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Allowed(%s) = %v, want %v", addr, got, want)
		}
	}
}

// Send passes the caller's method, headers and body, returns any status,
// and cuts a body longer than MaxBytes instead of failing.
func TestSend(t *testing.T) {
	t.Parallel()
	var gotMethod, gotHeader, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotMethod, gotHeader = r.Method, r.Header.Get("X-Api-Key")
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.WriteHeader(http.StatusTeapot)
		w.Write([]byte(strings.Repeat("x", 100)))
	}))
	defer srv.Close()
	c := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, MaxBytes: 64})
	resp, err := c.Send(context.Background(), Request{Method: http.MethodPost, URL: srv.URL + "/orders",
		Header: http.Header{"X-Api-Key": {"k1"}}, Body: []byte(`{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if gotMethod != "POST" || gotHeader != "k1" || gotBody != `{"a":1}` {
		t.Fatalf("the server got %s %q %q", gotMethod, gotHeader, gotBody)
	}
	if resp.Status != http.StatusTeapot || len(resp.Body) != 64 || !resp.Truncated {
		t.Fatalf("got status %d, %d bytes, truncated %v", resp.Status, len(resp.Body), resp.Truncated)
	}

	// Without the range opened, the same server is refused at dial time.
	if _, err := New(Config{}).Send(context.Background(), Request{Method: http.MethodGet, URL: srv.URL}); !Blocked(err) {
		t.Fatalf("got %v, want a refusal", err)
	}
}

// CheckDestination refuses before any request what the guard would refuse
// at dial time and localhost; other names, whatever they resolve to, are
// left to the dial (resolving them here told the saver which exist).
func TestCheckDestination(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	for _, raw := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://127.0.0.1:8080/",
		"http://[::1]/",
		"http://10.1.2.3/",
		"http://0x7f000001/",
		"http://localhost:9000/", // loopback by definition (RFC 6761)
		"http://api.LOCALHOST./",
		"ftp://example.com/",
		"http://user:pw@example.com/",
	} {
		if err := c.CheckDestination(context.Background(), raw); !Blocked(err) {
			t.Errorf("%s: got %v, want a refusal", raw, err)
		}
	}
	for _, raw := range []string{
		"https://93.184.215.14/api",
		"https://name-that-does-not-resolve.invalid/", // left to the dial-time check
		"http://" + ownName(t) + "/",                  // resolves to a private address, left to it too
	} {
		if err := c.CheckDestination(context.Background(), raw); err != nil {
			t.Errorf("%s: got %v, want it allowed", raw, err)
		}
	}
	open := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	if err := open.CheckDestination(context.Background(), "http://localhost:9000/"); err != nil {
		t.Errorf("an opened range: got %v", err)
	}
}

// A port outside 1 to 65535 is refused and named (url.Parse takes any
// digits); an empty port is the scheme's default, and the bounds pass.
func TestCheckURLPorts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw      string
		wantPort string // "": allowed
	}{
		{"https://example.com:99999/h", "99999"},
		{"https://example.com:0/h", "0"},
		{"https://example.com:65536/", "65536"},
		{"http://93.184.215.14:99999999999999999999/", "99999999999999999999"},
		{"https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:70000/", "70000"},
		{"https://example.com:1/", ""},
		{"https://example.com:65535/", ""},
		{"https://example.com:/", ""},
		{"https://example.com/", ""},
	} {
		u, err := url.Parse(tc.raw)
		if err != nil {
			t.Fatalf("%s: %v", tc.raw, err)
		}
		err = CheckURL(u)
		if tc.wantPort == "" {
			if err != nil {
				t.Errorf("%s: got %v, want it allowed", tc.raw, err)
			}
			continue
		}
		if !Blocked(err) || !strings.Contains(err.Error(), "port "+tc.wantPort+" ") {
			t.Errorf("%s: got %v, want a refusal naming port %s", tc.raw, err, tc.wantPort)
		}
	}
	// A redirect to such a port is refused as well.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://93.184.215.14:99999/", http.StatusFound)
	}))
	defer srv.Close()
	c := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if _, err := c.Get(context.Background(), srv.URL); !Blocked(err) || !strings.Contains(err.Error(), "port 99999") {
		t.Fatalf("redirect: got %v, want a refusal naming port 99999", err)
	}
}

// A request that got no response says what went wrong with the host the
// caller named, never the address a name resolved to nor Go's dial error
// (an intranet's addresses and open ports); the cause stays wrapped.
func TestUnreachedNamesNoAddress(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closedPort, _ := net.SplitHostPort(closed.Addr().String())
	closed.Close()

	guard := New(Config{})
	open := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	for _, c := range []struct {
		client *Client
		url    string
		want   string
		is     error
	}{
		// A name inside the network and a name that exists nowhere read
		// alike: a caller cannot list the network's names.
		{guard, "http://localhost:" + port + "/x", "localhost:" + port + " does not resolve to a public address", ErrBlocked},
		{guard, "http://no-such-host.invalid:" + port + "/x", "no-such-host.invalid:" + port + " does not resolve to a public address", nil},
		{open, "http://127.0.0.1:" + closedPort + "/x", "127.0.0.1:" + closedPort + " refused the connection", syscall.ECONNREFUSED},
		{open, "http://no-such-host.invalid/x", "no-such-host.invalid does not resolve to a public address", nil},
	} {
		_, err := c.client.Get(context.Background(), c.url)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: got %v, want %q", c.url, err, c.want)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: %v does not wrap %v", c.url, err, c.is)
		}
		_, err = c.client.Send(context.Background(), Request{Method: http.MethodPost, URL: c.url})
		if err == nil || err.Error() != c.want {
			t.Errorf("Send %s: got %v, want %q", c.url, err, c.want)
		}
	}
	err = guard.CheckDestination(context.Background(), "http://localhost:"+port+"/")
	if err == nil || strings.Contains(err.Error(), "127.0.0.1") || strings.Contains(err.Error(), "::1") {
		t.Errorf("CheckDestination: got %v, want a refusal that names no address", err)
	}
	// A name that resolves nowhere passes CheckDestination (the dial checks
	// later).
	if err := guard.CheckDestination(context.Background(), "http://no-such-host.invalid/a.png"); err != nil {
		t.Errorf("CheckDestination of an unresolved name: %v", err)
	}
}

// A response's headers are bounded too: a server answering 4 MiB of
// headers (Go's client alone reads up to 10 MiB of them) gets no response
// read, by Send or Get.
func TestCapsHeaderSize(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for i := range 4 {
			w.Header().Set("X-Big-"+string(rune('a'+i)), strings.Repeat("h", 1<<20))
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	c := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if r, err := c.Send(context.Background(), Request{Method: http.MethodGet, URL: srv.URL}); err == nil {
		t.Fatalf("Send read a response of %d header bytes, want an error", len(r.Header.Get("X-Big-a"))*4)
	}
	if _, err := c.Get(context.Background(), srv.URL); err == nil {
		t.Fatal("Get read the response, want an error")
	}
}

// ownName is the machine's name, which its hosts file resolves to a
// loopback or private address.
func ownName(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", h)
	if err != nil || len(addrs) == 0 || (addrs[0].IsGlobalUnicast() && !addrs[0].IsPrivate()) {
		t.Fatalf("this test needs the machine's name %s to resolve to a private address (its hosts file): %v %v", h, addrs, err)
	}
	return h
}

// A response whose body stops coming (a slow drip past the timeout) or is
// cut off (a reset) is refused in words that name no address or port: Go's
// own name both ends of the connection.
func TestUnfinishedBodyNamesNoAddress(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reset" {
			conn, buf, _ := w.(http.Hijacker).Hijack()
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
			buf.Flush()
			conn.(*net.TCPConn).SetLinger(0) // a reset, not an end
			conn.Close()
			return
		}
		w.Write([]byte("a"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	c := New(Config{Timeout: 300 * time.Millisecond, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	for path, want := range map[string]string{
		"/slow":  host + " did not send its response in time",
		"/reset": host + " broke off its response",
	} {
		_, err := c.Get(context.Background(), srv.URL+path)
		if err == nil || err.Error() != want {
			t.Errorf("Get %s: got %v, want %q", path, err, want)
		}
		if reason, ok := Reason(err); !ok || reason != want {
			t.Errorf("Reason %s: got %q %v", path, reason, ok)
		}
		_, err = c.Send(context.Background(), Request{Method: http.MethodGet, URL: srv.URL + path})
		if err == nil || err.Error() != want {
			t.Errorf("Send %s: got %v, want %q", path, err, want)
		}
	}
}

// An IPv6 zone ("%eth0") changes nothing of where a packet to a global
// address goes, and the guard reads the address without it: netip's
// Prefix.Contains is false for any zoned address, so the checks of NAT64,
// 6to4, Teredo and the blocked ranges passed a zoned private address, at
// dial time too (the dialled address keeps its zone).
func TestAllowedIgnoresZone(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	for _, addr := range []string{
		"64:ff9b::a9fe:a9fe%eth0", "64:ff9b::a00:1%1", "64:ff9b:1::a00:1%x",
		"2002:7f00:1::1%eth0", "2001:0:a00:1::1%eth0", "fec0::1%eth0",
	} {
		if c.Allowed(netip.MustParseAddr(addr)) {
			t.Errorf("Allowed(%s) = true, want false", addr)
		}
	}
	if err := c.CheckDestination(context.Background(), "http://[64:ff9b::a9fe:a9fe%25eth0]/latest/meta-data/"); !Blocked(err) {
		t.Errorf("a zoned NAT64 address of the metadata service: got %v, want a refusal", err)
	}
}

// FuzzAllowed checks that an address's zone, or its IPv4-mapped IPv6
// form, never changes what the guard allows.
func FuzzAllowed(f *testing.F) {
	f.Add([]byte(netip.MustParseAddr("64:ff9b::a9fe:a9fe").AsSlice()), "eth0")
	f.Add([]byte(netip.MustParseAddr("2002:808:808::1").AsSlice()), "1")
	f.Add([]byte{127, 0, 0, 1}, "")
	c := New(Config{})
	f.Fuzz(func(t *testing.T, b []byte, zone string) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		want := c.Allowed(a)
		if a.Is4() {
			if got := c.Allowed(netip.AddrFrom16(a.As16())); got != want {
				t.Fatalf("Allowed(%s) = %v, but %v for its IPv4-mapped form", a, want, got)
			}
			return
		}
		if z := a.WithZone(zone); c.Allowed(z) != want {
			t.Fatalf("Allowed(%s) = %v, but %v with zone %q", a, want, !want, zone)
		}
	})
}
