package writeguard

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// A stream quiet for longer than the timeout goes on, over HTTP/2 (where a
// deadline that passes resets the stream, write or no write) and HTTP/1.1.
func TestSilencesAreNotBounded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		g := New(w, 200*time.Millisecond)
		defer g.Stop()
		for _, line := range []string{"one\n", "two\n"} {
			if _, err := g.Write(w, []byte(line)); err != nil {
				return
			}
			if err := g.Flush(); err != nil {
				return
			}
			time.Sleep(600 * time.Millisecond)
		}
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	for name, protocols := range map[string]func(*http.Protocols){
		"HTTP/2 (h2c)": func(p *http.Protocols) { p.SetUnencryptedHTTP2(true) },
		"HTTP/1.1":     func(p *http.Protocols) { p.SetHTTP1(true) },
	} {
		tr := &http.Transport{Protocols: new(http.Protocols)}
		protocols(tr.Protocols)
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			got = append(got, sc.Text())
		}
		resp.Body.Close()
		if err := sc.Err(); err != nil || strings.Join(got, " ") != "one two" {
			t.Errorf("%s: read %q, %v; want both lines", name, got, err)
		}
		tr.CloseIdleConnections()
	}
}

// A client that stops reading: the write waiting for it fails at the
// timeout, and the handler ends.
func TestAWriteNobodyReadsFails(t *testing.T) {
	t.Parallel()
	ended := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		g := New(w, 300*time.Millisecond)
		defer g.Stop()
		chunk := []byte(strings.Repeat("token ", 10_000))
		for {
			if _, err := g.Write(w, chunk); err != nil {
				ended <- err
				return
			}
			if err := g.Flush(); err != nil {
				ended <- err
				return
			}
		}
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the handler ended with %v, want a write past its deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write nobody reads still blocks its handler after 10 s")
	}
}

// deadlineRecorder is a ResponseWriter whose writes take about as long as
// the guard's timeout, and which records when a deadline is set.
type deadlineRecorder struct {
	httptest.ResponseRecorder
	took time.Duration
	mu   sync.Mutex
	set  []time.Time
}

func (d *deadlineRecorder) Write(b []byte) (int, error) {
	for end := time.Now().Add(d.took); time.Now().Before(end); {
	}
	return len(b), nil
}

func (d *deadlineRecorder) SetWriteDeadline(time.Time) error {
	time.Sleep(100 * time.Microsecond) // as a connection's may take
	d.mu.Lock()
	defer d.mu.Unlock()
	d.set = append(d.set, time.Now())
	return nil
}

// A timer that fires as its write returns moves no deadline once the
// write has returned: the silence after it (and the next write) stays
// unbounded.
func TestNoDeadlineAfterTheWriteReturned(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Microsecond
	for i := range 1000 {
		d := &deadlineRecorder{took: timeout - 50*time.Microsecond + time.Duration(i%100)*time.Microsecond}
		g := New(d, timeout)
		if _, err := g.Write(d, []byte("x")); err != nil {
			t.Fatal(err)
		}
		returned := time.Now()
		time.Sleep(2 * timeout)
		g.Stop()
		d.mu.Lock()
		set := d.set
		d.mu.Unlock()
		for _, at := range set {
			if at.After(returned) {
				t.Fatalf("write %d: the deadline was moved %v after the write returned", i, at.Sub(returned))
			}
		}
	}
}
