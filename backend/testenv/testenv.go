// Package testenv runs a whole Parley instance for end-to-end tests: a fresh
// database, the real handler behind a real HTTP server on loopback (HTTP/1.1
// and h2c), two organizations with keys, and clients for every protocol.
package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	sse "github.com/tmaxmax/go-sse"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/dbtest"
	"github.com/parleyhq/parley/backend/server"
)

// Org is a bootstrapped organization and its first (admin+chat) key.
type Org struct {
	ID  uuid.UUID
	Key string
}

// Env is a running instance.
type Env struct {
	T      testing.TB
	App    *server.App
	Server *httptest.Server
	URL    string
	DBURL  string
	// A and B are two organizations on the pro plan.
	A, B Org
}

// TestSecretsKey seals the tests' secrets: webhook signing secrets and
// http_request header values (32 bytes of 0x01).
const TestSecretsKey = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="

// Option changes the configuration of an instance.
type Option func(*server.Config)

// WithWorkers runs the instance's job workers (ingestion, webhook
// deliveries), as `parley serve` does by default.
func WithWorkers(c *server.Config) { c.Workers = server.DefaultWorkers }

var quietLogs sync.Once

// New starts an instance on a fresh database.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	return NewOn(t, dbtest.New(t), opts...)
}

// NewOn starts an instance on an existing database (a second instance of
// the same deployment).
func NewOn(t testing.TB, dbURL string, opts ...Option) *Env {
	t.Helper()
	// Logs are formatted as in production (JSON) but dropped, unless
	// PARLEY_TEST_LOG is set.
	quietLogs.Do(func() {
		if os.Getenv("PARLEY_TEST_LOG") == "" {
			slog.SetDefault(slog.New(server.LogHandler{Handler: slog.NewJSONHandler(io.Discard, nil)}))
		}
	})
	// Not migrated at startup: dbtest's databases come from a template that
	// db.Migrate, the same call, made (a startup migration is tested in
	// backend/server). No job workers unless asked for (WithWorkers): an
	// instance is then as `parley serve --workers 0` runs it, and River's
	// start (four connections of its own, its leader's first maintenance
	// pass) is most of what an instance costs Postgres in a test.
	cfg := server.Config{
		DatabaseURL: dbURL, ShutdownTimeout: 5 * time.Second, LastUsedFlush: time.Hour,
		SecretsKey: TestSecretsKey,
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx := context.Background()
	app, err := server.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(app.Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	workCtx, stopWork := context.WithCancel(context.Background())
	worked := make(chan struct{})
	go func() {
		defer close(worked)
		if err := app.RunWorkers(workCtx); err != nil {
			t.Errorf("workers: %v", err)
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		stopWork()
		<-worked
		app.Close()
	})
	e := &Env{T: t, App: app, Server: srv, URL: srv.URL, DBURL: dbURL}
	e.A = e.Bootstrap("Org A", "pro")
	e.B = e.Bootstrap("Org B", "pro")
	return e
}

// Bootstrap creates an organization on plan p.
func (e *Env) Bootstrap(name, p string) Org {
	e.T.Helper()
	id, key, err := account.Bootstrap(context.Background(), e.App.Store, name, p)
	if err != nil {
		e.T.Fatal(err)
	}
	return Org{ID: id, Key: key}
}

// H2C is an HTTP client that speaks cleartext HTTP/2 only (for gRPC).
func H2C() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols), TLSClientConfig: &tls.Config{}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.DialContext = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	return &http.Client{Transport: tr}
}

// GRPC is a grpc-go connection to url (a test server's, h2c), closed when
// the test ends: the client most gRPC users have, next to connect-go's.
func GRPC(t testing.TB, url string) *grpc.ClientConn {
	conn, err := grpc.NewClient(strings.TrimPrefix(url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Bearer is a Connect client interceptor that sends key.
func Bearer(key string) connect.Interceptor {
	return bearer("Bearer " + key)
}

// bearer sets Authorization on every call a client makes, unary and
// streaming (a unary interceptor alone sent streams without the key).
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Response is a REST reply.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test if it is not JSON.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("body is not JSON (%v): %s", err, r.Body)
	}
}

// ErrorBody is SPEC §7's error shape.
type ErrorBody struct {
	Error struct {
		Code       string `json:"code"`
		Message    string `json:"message"`
		Field      string `json:"field"`
		RetryAfter *int64 `json:"retryAfter"`
	} `json:"error"`
}

// Err decodes an error reply.
func (r Response) Err(t testing.TB) ErrorBody {
	t.Helper()
	var b ErrorBody
	r.JSON(t, &b)
	return b
}

// Do sends a REST request with key (none when empty) and a body: a string or
// []byte is sent as is, anything else as JSON.
func (e *Env) Do(method, path, key string, body any) Response {
	e.T.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.T.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		e.T.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.T.Fatal(err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Post sends a JSON body with extra headers and returns the open response
// (for streams); the caller closes its body.
func (e *Env) Post(path string, headers map[string]string, body string) *http.Response {
	e.T.Helper()
	req, err := http.NewRequest(http.MethodPost, e.URL+path, bytes.NewBufferString(body))
	if err != nil {
		e.T.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	return resp
}

// ReadSSE reads a whole Server-Sent Events stream with an SSE parser.
func ReadSSE(t testing.TB, r io.Reader) []sse.Event {
	t.Helper()
	var out []sse.Event
	for ev, err := range sse.Read(r, nil) {
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		out = append(out, ev)
	}
	return out
}
