package llm

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Timeouts are the per-phase deadlines of a provider call. There is no
// deadline on the whole call: a long answer streams as long as it keeps
// coming, and the turn's own deadline (chat.Service.TurnTimeout) bounds it.
type Timeouts struct {
	// Headers bounds the wait from sending the request to the response's
	// headers.
	Headers time.Duration
	// Idle bounds each wait for more of the body: the first chunk of a
	// stream, and every gap between chunks. Time the caller spends between
	// reads (a slow client) does not count.
	Idle time.Duration
}

// DefaultTimeouts are the providers' deadlines unless a client says
// otherwise: generous, as a large prompt or a reasoning model can keep a
// provider silent for a while before its first token, but a connection that
// stays silent for a minute is dead.
var DefaultTimeouts = Timeouts{Headers: 60 * time.Second, Idle: 60 * time.Second}

// The transport's connection phases: a provider that does not accept or
// finish a TLS handshake within these is unreachable.
const (
	dialTimeout = 10 * time.Second
	tlsTimeout  = 10 * time.Second
)

// maxIdlePerHost is how many idle connections to one provider are kept for
// the next turns. Go's default (2) closes almost every connection of a busy
// instance after its turn, so each turn pays a new TCP and TLS handshake
// and the closed sockets pile up in TIME_WAIT; a few thousand is the order
// of the concurrent turns one instance holds.
const maxIdlePerHost = 4096

// transport is every provider's: one pool of connections per provider host,
// shared by all clients (NewHTTPClient), so connections are reused across
// turns and providers' clients. HTTP/2 is used where the provider speaks it.
var transport = sync.OnceValue(func() *http.Transport {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   tlsTimeout,
		MaxIdleConns:          0, // no bound across hosts; each host's is maxIdlePerHost
		MaxIdleConnsPerHost:   maxIdlePerHost,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
})

// NewHTTPClient is a client for a provider's API on the shared transport,
// with the given per-phase deadlines (zero fields: DefaultTimeouts').
func NewHTTPClient(t Timeouts) *http.Client {
	if t.Headers <= 0 {
		t.Headers = DefaultTimeouts.Headers
	}
	if t.Idle <= 0 {
		t.Idle = DefaultTimeouts.Idle
	}
	return &http.Client{Transport: &phased{base: transport(), t: t}}
}

// ErrProviderTimeout is the cause of a provider call that a per-phase
// deadline ended. It matches context.DeadlineExceeded (errors.Is) and is a
// net.Error timeout, as a deadline the transport enforces would be.
var ErrProviderTimeout error = providerTimeout{}

type providerTimeout struct{}

func (providerTimeout) Error() string        { return "the provider sent nothing within its deadline" }
func (providerTimeout) Timeout() bool        { return true }
func (providerTimeout) Temporary() bool      { return true }
func (providerTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// phased enforces Timeouts around a RoundTripper.
type phased struct {
	base http.RoundTripper
	t    Timeouts
}

func (p *phased) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	headers := time.AfterFunc(p.t.Headers, func() { cancel(ErrProviderTimeout) })
	resp, err := p.base.RoundTrip(req.WithContext(ctx))
	if !headers.Stop() && err == nil {
		// The deadline passed just as the headers came: the call's context
		// is cancelled, so its body cannot be read.
		resp.Body.Close()
		err = ErrProviderTimeout
	}
	if err != nil {
		cancel(nil)
		if errors.Is(context.Cause(ctx), ErrProviderTimeout) || err == ErrProviderTimeout {
			return nil, &timeoutError{phase: "no response headers", wait: p.t.Headers}
		}
		return nil, err
	}
	b := &idleBody{rc: resp.Body, idle: p.t.Idle, cancel: cancel, ctx: ctx}
	b.timer = time.AfterFunc(time.Hour, func() { cancel(ErrProviderTimeout) })
	b.timer.Stop()
	resp.Body = b
	return resp, nil
}

// idleBody is a response body whose every Read must get bytes within idle.
type idleBody struct {
	rc     io.ReadCloser
	idle   time.Duration
	timer  *time.Timer
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.idle)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF && errors.Is(context.Cause(b.ctx), ErrProviderTimeout) {
		return n, &timeoutError{phase: "nothing more of the response", wait: b.idle}
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.rc.Close()
	b.cancel(nil)
	return err
}

// timeoutError says which phase timed out; it unwraps to ErrProviderTimeout.
type timeoutError struct {
	phase string
	wait  time.Duration
}

func (e *timeoutError) Error() string {
	return e.phase + " from the provider within " + e.wait.String()
}
func (e *timeoutError) Unwrap() error   { return ErrProviderTimeout }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

var _ net.Error = (*timeoutError)(nil)

// IsProviderTimeout reports whether err is a provider call that a per-phase
// deadline ended.
func IsProviderTimeout(err error) bool { return errors.Is(err, ErrProviderTimeout) }
