package netguard

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
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
	} {
		if got := c.Allowed(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Allowed(%s) = %v, want %v", addr, got, want)
		}
	}
}
