package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/parleyhq/parley/backend/dbtest"
)

func TestBootstrapPrintsExactlyTheDocumentedJSON(t *testing.T) {
	t.Parallel()
	u := dbtest.New(t)
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Acme", "--plan", "starter", "--json"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	require.Regexp(t, regexp.MustCompile(`^\{"organizationId":"[0-9a-f-]{36}","apiKey":"prly_[a-z2-7]{39}","ownerEmail":"owner-[0-9a-f]{8}@parley.localhost","signInUrl":"http://localhost:8080/console/link\?token=[A-Za-z0-9_-]{43}"\}\n$`), out.String())

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
	} {
		require.Error(t, run(context.Background(), bad, &out, &errOut), "%v", bad)
	}
}

// The command serves, answers with the bootstrap key, and when its context
// ends (main cancels it on SIGTERM or Ctrl-C) drains and returns nil. It
// runs in-process through run(ctx, args): no go build inside a test.
func TestServeAndShutdown(t *testing.T) {
	t.Parallel()
	u := dbtest.New(t)
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"admin", "bootstrap", "--database-url", u, "--org", "Acme", "--plan", "free", "--json"}, &out, &errOut), errOut.String())
	var boot struct{ OrganizationID, APIKey string }
	require.NoError(t, json.Unmarshal(out.Bytes(), &boot))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	logs := &syncBuffer{}
	exited := make(chan error, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--addr", addr, "--database-url", u, "--shutdown-timeout", "5s", "--embeddings", "lexical"}, io.Discard, logs)
	}()

	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 15*time.Second, 50*time.Millisecond)
	req, _ := http.NewRequest("GET", base+"/api/agents", nil)
	req.Header.Set("Authorization", "Bearer "+boot.APIKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

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
	require.Contains(t, joined, `"msg":"shutting down"`)
	require.Regexp(t, `"request_id":"[0-9a-f]{16}"`, joined, "request logs carry ids")
}

// syncBuffer is a bytes.Buffer safe for the server's concurrent log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
