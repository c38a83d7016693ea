package dbtest

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy stands between a test's instance and its database on loopback, so
// that the test can fail the connection as a network or a failed-over
// Postgres would: Cut closes every connection and refuses new ones, Stall
// accepts and carries nothing (a peer that no longer answers), Restore
// carries again.
type Proxy struct {
	// URL is the database's URL through the proxy.
	URL string

	target string
	mu     sync.Mutex
	mode   int // proxyPass, proxyCut or proxyStall
	resume chan struct{}
	conns  map[net.Conn]struct{}
}

const (
	proxyPass = iota
	proxyCut
	proxyStall
)

// NewProxy starts a proxy to dbURL's host for t.
func NewProxy(t testing.TB, dbURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: u.Host, resume: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	u.Host = ln.Addr().String()
	p.URL = u.String()
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.Restore()
		p.closeAll()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(c) })
		}
	})
	return p
}

// Cut closes every connection through the proxy and refuses new ones
// (accepted and closed at once) until Restore.
func (p *Proxy) Cut() {
	p.set(proxyCut)
	p.closeAll()
}

// Stall keeps every connection open and carries nothing either way, new
// ones included, until Restore.
func (p *Proxy) Stall() { p.set(proxyStall) }

// Restore carries connections again (a stalled one resumes).
func (p *Proxy) Restore() { p.set(proxyPass) }

func (p *Proxy) set(mode int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == proxyStall && mode != proxyStall {
		close(p.resume)
		p.resume = make(chan struct{})
	}
	p.mode = mode
}

// gate waits while the proxy stalls and reports whether it carries.
func (p *Proxy) gate() bool {
	for {
		p.mu.Lock()
		mode, resume := p.mode, p.resume
		p.mu.Unlock()
		if mode != proxyStall {
			return mode == proxyPass
		}
		<-resume
	}
}

func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer client.Close()
	p.track(client, true)
	defer p.track(client, false)
	if !p.gate() {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	p.track(server, true)
	defer p.track(server, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if !p.gate() {
					return
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return // EOF or a closed side: both end
			}
		}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done // either side ends both
}
