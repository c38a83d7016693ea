package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/dbtest"
	parleyv1 "github.com/parleyhq/parley/backend/gen/parley/v1"
	"github.com/parleyhq/parley/backend/gen/parley/v1/parleyv1connect"
	"github.com/parleyhq/parley/backend/testenv"
	"github.com/parleyhq/parley/backend/testenv/syncbuf"
)

func TestBootstrapPrintsExactlyTheDocumentedJSON(t *testing.T) {
	t.Parallel()
	u := dbtest.New(t)
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Acme", "--plan", "starter", "--json"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	require.Regexp(t, regexp.MustCompile(`^\{"organizationId":"[0-9a-f-]{36}","apiKey":"prly_[a-z2-7]{39}","ownerEmail":"owner-[0-9a-f-]{36}@parley.localhost","signInUrl":"http://localhost:8080/console/link\?token=[A-Za-z0-9_-]{43}"\}\n$`), out.String())

	// A second organization in the same minute has an owner of its own
	// (the default email was the id's first 8 digits: a time).
	var first, second struct{ OrganizationID, OwnerEmail string }
	require.NoError(t, json.Unmarshal(out.Bytes(), &first))
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Acme 2", "--json"}, &out, &errOut), errOut.String())
	require.NoError(t, json.Unmarshal(out.Bytes(), &second))
	require.Equal(t, "owner-"+second.OrganizationID+"@parley.localhost", second.OwnerEmail)
	require.NotEqual(t, first.OwnerEmail, second.OwnerEmail)

	// A name is counted in characters: 200 of three bytes each is one.
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", strings.Repeat("組", 200)}, &out, &errOut), errOut.String())

	// With an email and a public URL; a second organization cannot reuse the email.
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Beta", "--email", "Ann@Example.com", "--public-url", "https://console.example/", "--json"}, &out, &errOut))
	var got struct{ OrganizationID, OwnerEmail, SignInURL string }
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	require.Equal(t, "ann@example.com", got.OwnerEmail)
	require.True(t, strings.HasPrefix(got.SignInURL, "https://console.example/console/link?token="), got.SignInURL)
	require.Error(t, run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Gamma", "--email", "ann@example.com"}, &out, &errOut))
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"admin", "signin-link", "--database-url", u, "--org", got.OrganizationID, "--email", "ann@example.com"}, &out, &errOut))
	require.Regexp(t, regexp.MustCompile(`^http://localhost:8080/console/link\?token=[A-Za-z0-9_-]{43}\n$`), out.String())
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"admin", "create-key", "--database-url", u, "--org", got.OrganizationID, "--scopes", "chat"}, &out, &errOut))
	require.Regexp(t, regexp.MustCompile(`^API key \(shown once, keep it\): prly_[a-z2-7]{39}\n$`), out.String())
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"admin", "operator", "--database-url", u, "--email", "ann@example.com"}, &out, &errOut))
	require.Equal(t, "ann@example.com operator: true\n", out.String())

	for _, bad := range [][]string{
		{"admin", "bootstrap", "--database-url", u, "--plan", "free"},
		{"admin", "bootstrap", "--database-url", u, "--org", "x", "--plan", "gold"},
		{"admin", "set-limits", "--database-url", u, "--org", "nope", "--per-minute", "1", "--per-day", "1"},
		{"admin", "signin-link", "--database-url", u, "--org", "nope", "--email", "a@b.c"},
		{"admin", "operator", "--database-url", u, "--email", "nobody@example.com"},
		{"admin", "create-key", "--database-url", u, "--org", "nope"},
		{"admin", "create-key", "--database-url", u, "--org", got.OrganizationID, "--scopes", "root"},
		{"admin", "create-key", "--database-url", u, "--org", got.OrganizationID, "--plan", "enterprise"},
		{"frobnicate"},
		{"serve", "--database-url", u, "--workers", "-1"},
	} {
		require.Error(t, run(context.Background(), bad, &out, &errOut), "%v", bad)
	}
	// A worker with no workers would run nothing: refused before it starts.
	err = run(context.Background(), []string{"worker", "--database-url", u, "--workers", "0"}, &out, &errOut)
	require.ErrorContains(t, err, "--workers (PARLEY_WORKERS) must be 1 or more")
	// A worker serves no API, so its metrics may take the API's default
	// port: it was refused as "the API's address". It goes on to the
	// database, which is nowhere here.
	err = run(context.Background(), []string{"worker", "--database-url", "postgres://parley@nowhere.invalid/parley", "--workers", "1", "--metrics-addr", ":8080"}, &out, &errOut)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "--metrics-addr")
}

// The command serves, answers with the bootstrap key, and when its context
// ends (main cancels it on SIGTERM or Ctrl-C) drains and returns nil. It
// runs in-process through run(ctx, args): no go build inside a test.
func TestServeAndShutdown(t *testing.T) {
	// Not parallel: serve sets the process's default logger, and this test
	// reads its own request lines from it.
	u := dbtest.New(t)
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Acme", "--plan", "free", "--json"}, &out, &errOut), errOut.String())
	var boot struct{ OrganizationID, APIKey string }
	require.NoError(t, json.Unmarshal(out.Bytes(), &boot))

	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	logs := &syncbuf.Buffer{}
	var metricsAddr string
	base, exited := serveOnFreePort(t, ctx, logs, func(addr string) []string {
		metricsAddr = freeAddr(t)
		return []string{"serve", "--addr", addr, "--metrics-addr", metricsAddr, "--database-url", u, "--shutdown-timeout", "5s", "--embeddings", "lexical"}
	})
	req, _ := http.NewRequest("GET", base+"/api/agents", nil)
	req.Header.Set("Authorization", "Bearer "+boot.APIKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	// A failed gRPC call travels behind an HTTP 200; a failed REST call
	// has its status. Both are logged with their code, real status and
	// the caller's organization and key ids.
	missing := "0198c3c2-7e3a-7b5c-9d0e-1f2a3b4c5d6e"
	agents := parleyv1connect.NewAgentServiceClient(testenv.H2C(), base, connect.WithGRPC(), connect.WithInterceptors(testenv.Bearer(boot.APIKey)))
	_, err = agents.GetAgent(context.Background(), &parleyv1.GetAgentRequest{Id: missing})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
	req, _ = http.NewRequest("GET", base+"/api/agents/"+missing, nil)
	req.Header.Set("Authorization", "Bearer "+boot.APIKey)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 404, resp.StatusCode)
	// An error connect-go raises before any interceptor (here a gRPC-Web
	// message that is not protobuf) travels in a
	// Grpc-Status header behind a 200: logged with its real status too.
	req, _ = http.NewRequest("POST", base+"/parley.v1.AgentService/ListAgents", strings.NewReader("\x00\x00\x00\x00\x03\xff\xff\xff"))
	req.Header.Set("Authorization", "Bearer "+boot.APIKey)
	req.Header.Set("Content-Type", "application/grpc-web+proto")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Grpc-Status"))
	require.NotEqual(t, "0", resp.Header.Get("Grpc-Status"))

	// The metrics listener answers; the API's port does not serve them.
	resp, err = http.Get("http://" + metricsAddr + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, string(body), `parley_request_duration_seconds_count{route="/parley.v1.AgentService/GetAgent",status_class="4xx"} 1`)
	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 404, resp.StatusCode)

	// The container health check: ready, and the answer printed.
	var hc bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"healthcheck", "--url", base + "/readyz"}, &hc, io.Discard))
	require.Equal(t, "ready\n", hc.String())

	stop() // what SIGTERM does to main's context
	select {
	case err := <-exited:
		require.NoError(t, err, "parley serve must end cleanly on shutdown")
	case <-time.After(10 * time.Second):
		t.Fatal("parley serve did not stop within 10 s of shutdown")
	}
	var all []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		all = append(all, l)
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), "log line is not JSON: %s", l)
		require.NotContains(t, l, boot.APIKey, "a log line holds the API key")
	}
	joined := strings.Join(all, "\n")
	line := func(path string) map[string]any {
		for _, l := range all {
			var rec map[string]any
			_ = json.Unmarshal([]byte(l), &rec)
			if rec["msg"] == "request" && rec["path"] == path {
				return rec
			}
		}
		t.Fatalf("no request line for %s in:\n%s", path, joined)
		return nil
	}
	uuidRe := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	rpc := line("/parley.v1.AgentService/GetAgent")
	require.EqualValues(t, 404, rpc["status"], "the real status of a gRPC not_found: %v", rpc)
	require.EqualValues(t, 200, rpc["http_status"], "what it traveled behind")
	require.Equal(t, "not_found", rpc["code"])
	require.Equal(t, "/parley.v1.AgentService/GetAgent", rpc["route"])
	require.Equal(t, boot.OrganizationID, rpc["org_id"])
	require.Regexp(t, uuidRe, rpc["key_id"])
	bad := line("/parley.v1.AgentService/ListAgents")
	require.Equal(t, "invalid_argument", bad["code"], "%v", bad)
	require.EqualValues(t, 400, bad["status"], "%v", bad)
	require.EqualValues(t, 200, bad["http_status"], "%v", bad)
	rest := line("/api/agents/" + missing)
	require.EqualValues(t, 404, rest["status"])
	require.NotContains(t, rest, "http_status")
	require.Equal(t, "NOT_FOUND", rest["code"])
	require.Equal(t, "GET /api/agents/{agentId}", rest["route"])
	require.Equal(t, boot.OrganizationID, rest["org_id"])
	require.Equal(t, rpc["key_id"], rest["key_id"], "the same key")
	require.Contains(t, joined, `"msg":"shutting down"`)
	require.Regexp(t, `"request_id":"[0-9a-f]{16}"`, joined, "request logs carry ids")
}

// syncbuf.Buffer is a bytes.Buffer safe for the server's concurrent log writes.
// serveOnFreePort runs `parley serve` with args(addr), addr a loopback
// port found free, and returns its base URL once it is ready, and the
// channel its exit arrives on. A port found free can be bound by another
// test process before serve binds it (make test runs four packages at
// once), and that process's server would answer our /readyz and reject our
// key (a 401 seen once): so readiness is asked only after serve logged that
// it serves on addr, and serve is started again on another port when it
// could not bind.
func serveOnFreePort(t *testing.T, ctx context.Context, logs *syncbuf.Buffer, args func(addr string) []string) (string, chan error) {
	t.Helper()
tries:
	for range 5 {
		addr := freeAddr(t)
		exited := make(chan error, 1)
		go func() { exited <- run(ctx, args(addr), io.Discard, logs) }()
		serving := `"msg":"serving","addr":"` + addr + `"`
		for !strings.Contains(logs.String(), serving) {
			select {
			case err := <-exited:
				if err != nil && strings.Contains(err.Error(), "address already in use") {
					continue tries
				}
				t.Fatalf("serve exited before serving: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		require.Eventually(t, func() bool {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		}, 15*time.Second, 50*time.Millisecond)
		return "http://" + addr, exited
	}
	t.Fatal("no free port in five tries")
	return "", nil
}

// freeAddr is a loopback address no one listened on a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// parley healthcheck fails (exit status 2 in main) on anything but 200, and
// says why; by default it asks the port of PARLEY_ADDR on loopback.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/readyz", r.URL.Path)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "2 migrations pending; run parley migrate\n")
	}))
	defer notReady.Close()
	var out bytes.Buffer
	err := run(context.Background(), []string{"healthcheck", "--url", notReady.URL + "/readyz"}, &out, io.Discard)
	require.ErrorContains(t, err, "answered 503: 2 migrations pending; run parley migrate")
	require.Empty(t, out.String())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + ln.Addr().String() + "/readyz"
	ln.Close()
	require.ErrorContains(t, run(context.Background(), []string{"healthcheck", "--url", closed}, &out, io.Discard), "not ready")
	require.ErrorContains(t, run(context.Background(), []string{"healthcheck", "--url", "::nope"}, &out, io.Discard), "--url")

	for addr, want := range map[string]string{
		":8080":        "http://127.0.0.1:8080/readyz",
		"0.0.0.0:9000": "http://127.0.0.1:9000/readyz",
		"[::]:9001":    "http://127.0.0.1:9001/readyz",
		"10.0.0.5:80":  "http://10.0.0.5:80/readyz",
		"nonsense":     "http://127.0.0.1:8080/readyz",
	} {
		require.Equal(t, want, readyURL(addr), addr)
	}
}

// SIGTERM during non-streaming JSON chats: one the provider finishes within
// the drain time answers 200; one still running when the drain begins is
// 503 SHUTTING_DOWN (never a 500), its partial answer stored as incomplete;
// serve returns within the shutdown timeout. In-process, with the models
// file pointing every model at a fake provider.
func TestShutdownDuringJSONChat(t *testing.T) {
	// Not parallel: serve sets the process's default logger, and this test
	// reads its own request lines from it.
	u := dbtest.New(t)
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Acme", "--plan", "pro", "--json"}, &out, &errOut), errOut.String())
	var boot struct{ OrganizationID, APIKey string }
	require.NoError(t, json.Unmarshal(out.Bytes(), &boot))

	fake := testenv.NewFakeProvider(t)
	fake.Reply = func(_ int, body map[string]any) testenv.FakeReply {
		msgs := body["messages"].([]any)
		if msgs[len(msgs)-1].(map[string]any)["content"] == "quick" {
			return testenv.FakeReply{Tokens: []string{"Done", " in", " time."}, Delay: 100 * time.Millisecond}
		}
		return testenv.FakeReply{Tokens: []string{"tick "}, Delay: 100 * time.Millisecond, Forever: true}
	}
	models := filepath.Join(t.TempDir(), "models.json")
	require.NoError(t, os.WriteFile(models, []byte(`{"providers":{"fake":{"type":"openai","baseURL":"`+fake.URL+`/v1"}},
		"models":{"gpt-4o-mini":{"provider":"fake","model":"fake-mini"}}}`), 0o600))

	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	base, exited := serveOnFreePort(t, ctx, &syncbuf.Buffer{}, func(addr string) []string {
		return []string{"serve", "--addr", addr, "--database-url", u, "--shutdown-timeout", "3s",
			"--turn-timeout", "0", "--embeddings", "lexical", "--models-file", models}
	})
	post := func(path, body string) (int, []byte) {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+boot.APIKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}
	status, b := post("/api/agents", `{"name":"n","instructions":"i"}`)
	require.Equal(t, 201, status, "%s", b)
	var agent struct{ ID string }
	require.NoError(t, json.Unmarshal(b, &agent))

	type reply struct {
		status int
		body   []byte
	}
	quick, slow := make(chan reply, 1), make(chan reply, 1)
	go func() {
		s, b := post("/api/v2/agent/"+agent.ID+"/chat", `{"query":"quick","conversationId":"term-quick"}`)
		quick <- reply{s, b}
	}()
	go func() {
		s, b := post("/api/v2/agent/"+agent.ID+"/chat", `{"query":"slow","conversationId":"term-slow"}`)
		slow <- reply{s, b}
	}()
	require.Eventually(t, func() bool { return len(fake.Requests()) == 2 }, 10*time.Second, 10*time.Millisecond)
	// A conversation's watch stream (resumable) ends as shutdown begins,
	// not at the drain point (1.5 s into the 3 s grace) as turns do.
	req, _ := http.NewRequest("GET", base+"/api/v2/conversations/term-slow/events", nil)
	req.Header.Set("Authorization", "Bearer "+boot.APIKey)
	watch, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, watch.StatusCode)
	watched := make(chan time.Time, 1)
	go func() {
		defer watch.Body.Close()
		_, _ = io.Copy(io.Discard, watch.Body)
		watched <- time.Now()
	}()
	stopped := time.Now()
	stop() // what SIGTERM does to main's context
	select {
	case at := <-watched:
		require.Less(t, at.Sub(stopped), time.Second, "the watch stream outlived the start of the shutdown")
	case <-time.After(10 * time.Second):
		t.Fatal("the watch stream did not end")
	}

	r := <-quick
	require.Equal(t, 200, r.status, "a turn that ends within the drain time is answered: %s", r.body)
	require.Contains(t, string(r.body), `"answer":"Done in time."`)
	r = <-slow
	require.Equal(t, 503, r.status, "%s", r.body)
	var eb struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.Unmarshal(r.body, &eb), "%s", r.body)
	require.Equal(t, "SHUTTING_DOWN", eb.Error.Code)
	select {
	case err := <-exited:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("parley serve did not stop within 10 s of shutdown")
	}

	// What the conversations hold: the slow one's partial answer, incomplete.
	conn, err := pgx.Connect(context.Background(), u)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	tx, err := conn.Begin(context.Background())
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(context.Background(), "SELECT set_config('app.org_id', $1, true)", boot.OrganizationID)
	require.NoError(t, err)
	for conv, want := range map[string]bool{"term-quick": false, "term-slow": true} {
		var content string
		var incomplete bool
		require.NoError(t, tx.QueryRow(context.Background(), `SELECT content, incomplete FROM messages
			WHERE conversation_id = $1 AND role = 'assistant'`, conv).Scan(&content, &incomplete))
		require.Equal(t, want, incomplete, conv)
		require.NotEmpty(t, content, conv)
	}
}

// Help is asked for and given, for the commands and for admin's; an
// unknown admin command shows the usage too.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"admin", "--help"}, {"admin", "-h"}} {
		var out, errs bytes.Buffer
		require.NoError(t, run(context.Background(), args, &out, &errs), "%v", args)
		require.Contains(t, out.String(), "parley admin bootstrap", "%v", args)
	}
	var out, errs bytes.Buffer
	err := run(context.Background(), []string{"admin", "nope"}, &out, &errs)
	require.ErrorContains(t, err, `unknown admin command "nope"`)
	require.Contains(t, errs.String(), "parley admin bootstrap")
	// serve's flags: ErrHelp, which main does not count as a failure.
	err = run(context.Background(), []string{"serve", "--help"}, &out, &errs)
	require.ErrorIs(t, err, flag.ErrHelp)
}

// With PARLEY_MIGRATE=false (instances that leave migrations to `parley
// migrate`), an admin command finding migrations pending stops and says
// so, and migrates nothing. Not parallel: the environment is the
// process's.
func TestAdminCommandsLeaveMigrationsToMigrate(t *testing.T) {
	t.Setenv("PARLEY_MIGRATE", "false")
	u := dbtest.NewEmpty(t)
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Acme"}, &out, &errOut)
	require.ErrorContains(t, err, "run `parley migrate` first")
	n, err := db.Pending(context.Background(), u)
	require.NoError(t, err)
	require.Positive(t, n, "the command migrated the database")
}

// A mistyped flag (or --help) prints the flags with their defaults, which
// are read from the environment: the secrets configured there (the
// database's password, the secrets key, the search backends' keys, a Redis
// password) must not be printed with them, to a terminal or to a
// container's logs. Not parallel: the environment is the process's.
func TestUsageShowsNoSecrets(t *testing.T) {
	secrets := map[string]string{
		"PARLEY_DATABASE_URL":         "postgres://parley:db-pass-s3cr3t@db.internal:5432/parley",
		"PARLEY_REDIS_URL":            "redis://:redis-pass-s3cr3t@redis.internal:6379/0",
		"PARLEY_SECRETS_KEY":          "c2VjcmV0cy1rZXktczNjcjN0LXNlY3JldHMta2V5LXg=",
		"PARLEY_SECRETS_KEY_PREVIOUS": "b2xkLXNlY3JldHMta2V5LXMzY3IzdC1vbGQta2V5LXg=",
		"PARLEY_BRAVE_API_KEY":        "brave-key-s3cr3t",
		"PARLEY_TAVILY_API_KEY":       "tvly-key-s3cr3t",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	for _, args := range [][]string{
		{"serve", "--no-such-flag"}, {"serve", "--help"}, {"worker", "--no-such-flag"},
		{"migrate", "--no-such-flag"}, {"admin", "bootstrap", "--no-such-flag"}, {"admin", "create-key", "--help"},
		{"admin", "reseal", "--no-such-flag"}, {"admin", "reseal", "--help"},
	} {
		var out, errs bytes.Buffer
		require.Error(t, run(context.Background(), args, &out, &errs), "%v", args)
		printed := out.String() + errs.String()
		require.Contains(t, printed, "-database-url", "%v: the usage was printed", args)
		for name, v := range secrets {
			for _, part := range []string{"s3cr3t", v} {
				require.NotContains(t, printed, part, "%v printed %s", args, name)
			}
		}
	}
}

// A PARLEY_MIGRATE that cannot be read (no, off) is an error, as for
// serve, not the default true: an admin command meant not to migrate a
// production database did so. Not parallel: the environment is the
// process's.
func TestAdminCommandsRefuseAnUnreadableMigrate(t *testing.T) {
	t.Setenv("PARLEY_MIGRATE", "no")
	u := dbtest.NewEmpty(t)
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Acme"}, &out, &errOut)
	require.ErrorContains(t, err, "PARLEY_MIGRATE")
	n, err := db.Pending(context.Background(), u)
	require.NoError(t, err)
	require.Positive(t, n, "the command migrated the database")
}

// An admin command uses the database alone: a server's setting it does not
// use (an embedder whose key this shell lacks) does not stop it, as it
// stops serve. Not parallel: the environment is the process's.
func TestAdminCommandsIgnoreServersSettings(t *testing.T) {
	t.Setenv("PARLEY_EMBEDDINGS", "openai")
	t.Setenv("PARLEY_OPENAI_API_KEY", "")
	u := dbtest.NewEmpty(t)
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Acme"}, &out, &errOut)
	require.NoError(t, err, "%s", errOut.String())
	require.Contains(t, out.String(), "API key (shown once")
}

// Settings that cannot work stop serve at start with an error naming the
// flag (or variable), before it serves: --last-used-flush 0 served, then
// panicked in the flusher (time.NewTicker). Not parallel: the environment
// is the process's.
func TestServeRefusesUnworkableSettings(t *testing.T) {
	u := dbtest.New(t)
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{args: []string{"--last-used-flush", "0"}, want: "-last-used-flush"},
		{args: []string{"--last-used-flush", "-1s"}, want: "-last-used-flush"},
		{env: map[string]string{"PARLEY_LAST_USED_FLUSH": "0s"}, want: "PARLEY_LAST_USED_FLUSH"},
		{args: []string{"--shutdown-timeout", "-5s"}, want: "--shutdown-timeout"},
		{args: []string{"--db-max-conns", "-3"}, want: "--db-max-conns"},
		{args: []string{"--search-ef", "-1"}, want: "--search-ef"},
		{args: []string{"--public-url", "console.example.com"}, want: "--public-url"},
		{env: map[string]string{"PARLEY_PUBLIC_URL": "https://"}, want: "--public-url"},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var errs syncbuf.Buffer
		args := append([]string{"serve", "--addr", freeAddr(t), "--database-url", u, "--embeddings", "lexical", "--workers", "0"}, tc.args...)
		err := run(ctx, args, io.Discard, &errs)
		cancel()
		require.ErrorContains(t, err, tc.want, "%v %v", tc.env, tc.args)
		require.NotContains(t, errs.String(), `"msg":"serving"`, "%v %v", tc.env, tc.args)
		for k := range tc.env {
			os.Unsetenv(k) // t.Setenv restores it at the end only
		}
	}
}

// The admin commands check their flags before they open (and migrate) the
// database, and name the flag at fault: an unknown plan was refused as
// "higher than the organization's", an email or a limit without its flag's
// name, a --public-url not at all (every link printed was broken).
func TestAdminCommandsCheckTheirFlags(t *testing.T) {
	const org = "0190b4e4-6f5b-7000-8000-000000000000"
	nowhere := []string{"--database-url", "postgres://parley@nowhere.invalid/parley"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bootstrap", "--org", "Acme", "--public-url", "console.example.com"}, "--public-url"},
		{[]string{"bootstrap", "--org", "Acme", "--plan", "gold"}, `--plan "gold"`},
		{[]string{"bootstrap", "--org", "Acme", "--email", "not an email"}, "--email"},
		// Its name is counted in characters and held to text: a NUL was
		// a raw database error, and 100 Japanese characters were too long.
		{[]string{"bootstrap", "--org", " "}, "--org: the organization name must be 1 to 200 characters"},
		{[]string{"bootstrap", "--org", "Ac\x00me"}, "--org: the organization name must be 1 to 200 characters"},
		{[]string{"bootstrap", "--org", strings.Repeat("組", 201)}, "--org: the organization name must be 1 to 200 characters"},
		{[]string{"signin-link", "--org", org, "--email", "a@example.com", "--public-url", "localhost:8080"}, "--public-url"},
		{[]string{"signin-link", "--org", org}, "--email"},
		{[]string{"create-key", "--org", org, "--plan", "gold"}, `--plan "gold"`},
		// The API's rules for a key's name and scopes hold here too: a
		// blank or 1,000-character name and a scope named twice were stored.
		{[]string{"create-key", "--org", org, "--name", " "}, "--name: must be 1 to 100 characters"},
		{[]string{"create-key", "--org", org, "--name", strings.Repeat("k", 101)}, "--name: must be 1 to 100 characters"},
		{[]string{"create-key", "--org", org, "--scopes", "chat,chat"}, `--scopes: "chat" is named twice`},
		{[]string{"create-key", "--org", org, "--scopes", ""}, `--scopes: "" is not a scope`},
		{[]string{"operator", "--email", "@example.com"}, "--email"},
		{[]string{"set-limits", "--org", org, "--per-minute", "60"}, "--per-day 0"},
		{[]string{"set-limits", "--org", org, "--per-minute", "-1", "--per-day", "100"}, "--per-minute -1"},
		{[]string{"delete-org", "--org", org}, "--confirm is required"},
		{[]string{"delete-org", "--org", "acme", "--confirm", "Acme"}, `--org "acme"`},
		{[]string{"delete-org", "--org", org, "--confirm", "Acme", "--batch", "0"}, "--batch 0"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append(append([]string{"admin"}, tc.args...), nowhere...), &out, &errOut)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
		require.Empty(t, out.String(), "%v", tc.args)
	}
}

// An argument left after the flags is refused: the flag package stops at
// it, so that `--off false` took the operator flag away and `--migrate
// false` migrated, and every flag after it was dropped (this --database-url
// too: the command ran against the default database). Not parallel: the
// environment is the process's.
func TestStrayArgumentsAreRefused(t *testing.T) {
	// The default database is nowhere too: a command that ran anyway
	// reaches none.
	t.Setenv("PARLEY_DATABASE_URL", "postgres://parley@nowhere.invalid/parley")
	nowhere := "postgres://parley@nowhere.invalid/other"
	for _, args := range [][]string{
		{"admin", "operator", "--email", "ann@example.com", "--off", "false", "--database-url", nowhere},
		{"admin", "bootstrap", "--org", "Acme", "--json", "false", "--database-url", nowhere},
		{"serve", "--migrate", "false", "--database-url", nowhere},
		{"worker", "--migrate", "false", "--database-url", nowhere},
		{"migrate", "now"},
		{"healthcheck", "http://127.0.0.1:1/readyz"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		require.ErrorContains(t, err, "unexpected argument", "%v", args)
		require.Empty(t, out.String(), "%v", args)
	}
}

// A worker started with --migrate=false on a database whose migrations are
// behind (a release's `parley migrate` not run yet) runs no job until they
// are applied, then runs them: it has no /readyz to keep it out, and ran
// the release's jobs on the older schema, each failing. Not parallel: it
// sets the process's logger.
func TestWorkerWaitsForMigrations(t *testing.T) {
	u := dbtest.NewEmpty(t)
	ctx := context.Background()
	_, err := db.Migrate(ctx, u)
	require.NoError(t, err)
	// The release's last migration not applied yet.
	_, err = dbtest.Migrations(t, u).Down(ctx)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)

	var logs syncbuf.Buffer
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited := make(chan error, 1)
	go func() {
		exited <- run(wctx, []string{"worker", "--database-url", u, "--embeddings", "lexical", "--workers", "1", "--migrate=false"}, io.Discard, &logs)
	}()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "jobs wait for the migrations") },
		time.Minute, 20*time.Millisecond, "the worker did not wait: %s", logs.String())
	queues := func() (n int) {
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM river_queue").Scan(&n))
		return n
	}
	require.Zero(t, queues(), "no job runs before the migrations")

	_, err = db.Migrate(ctx, u)
	require.NoError(t, err)
	// A running River producer records its queues.
	require.Eventually(t, func() bool { return queues() > 0 }, time.Minute, 100*time.Millisecond, "the worker's jobs never started")
	cancel()
	require.NoError(t, <-exited)
}
