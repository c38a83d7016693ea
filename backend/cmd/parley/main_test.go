package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
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

// The real binary serves, answers with the bootstrap key, and on SIGTERM
// drains and exits 0.
func TestServeAndSIGTERM(t *testing.T) {
	t.Parallel()
	u := dbtest.New(t)
	bin := filepath.Join(t.TempDir(), "parley")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "admin", "bootstrap", "--database-url", u, "--org", "Acme", "--plan", "free", "--json").Output()
	require.NoError(t, err)
	var boot struct{ OrganizationID, APIKey string }
	require.NoError(t, json.Unmarshal(out, &boot))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--addr", addr, "--database-url", u, "--shutdown-timeout", "5s")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	logs := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs <- sc.Text()
		}
		close(logs)
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

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		require.NoError(t, err, "parley serve must exit 0 after SIGTERM")
	case <-time.After(10 * time.Second):
		t.Fatal("parley serve did not exit within 10 s of SIGTERM")
	}
	var all []string
	for l := range logs {
		all = append(all, l)
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), "log line is not JSON: %s", l)
		require.NotContains(t, l, boot.APIKey, "a log line holds the API key")
	}
	joined := strings.Join(all, "\n")
	require.Contains(t, joined, `"msg":"shutting down"`)
	require.Regexp(t, `"request_id":"[0-9a-f]{16}"`, joined, fmt.Sprint("request logs carry ids"))
}
