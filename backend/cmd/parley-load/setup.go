package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleyhq/parley/backend/llm/fakeopenai"
)

// env is what a run drives.
type env struct {
	cfg       config
	dbURL     string
	tmp       string
	parley    *exec.Cmd
	parleyURL string
	key       string
	agentID   string
	// model is the fake model's current behaviour: fast, or drip for the
	// held streams.
	model    atomic.Pointer[fakeopenai.Model]
	fast     *fakeopenai.Model
	modelURL string
	floorURL string
	// floorProxyURL is the floor's INSERT and then the model (floor.go);
	// promisesURL also stores the answer before replying.
	floorProxyURL string
	promisesURL   string
	floorPool     *pgxpool.Pool
	servers       []*http.Server
	client        *http.Client
	parleyDone    chan error
}

func setUp(ctx context.Context, c config) (_ *env, err error) {
	e := &env{cfg: c, fast: &fakeopenai.Model{Tokens: []string{"Hello", " from", " the", " fake", " model."}}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	e.client = &http.Client{Transport: &http.Transport{
		MaxIdleConns: 0, MaxIdleConnsPerHost: 20000, IdleConnTimeout: 30 * time.Second,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	}}
	// Parley's log is kept there, for reading after the run.
	if e.tmp, err = os.MkdirTemp("", "parley-load-"); err != nil {
		return nil, err
	}
	if e.dbURL, err = freshDatabase(ctx, c.adminURL, c.dbName); err != nil {
		return nil, err
	}

	// The fake model and the floor, in this process.
	model := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.model.Load().ServeHTTP(w, r) })
	e.model.Store(e.fast)
	if e.modelURL, err = e.serve(model); err != nil {
		return nil, err
	}
	if e.floorPool, err = floorPool(ctx, e.dbURL, c.floorConns); err != nil {
		return nil, err
	}
	if e.floorURL, err = e.serve(floorHandler(e.floorPool)); err != nil {
		return nil, err
	}
	if e.floorProxyURL, err = e.serve(floorProxyHandler(e.floorPool, e.client, e.modelURL, false)); err != nil {
		return nil, err
	}
	if e.promisesURL, err = e.serve(floorProxyHandler(e.floorPool, e.client, e.modelURL, true)); err != nil {
		return nil, err
	}

	// Parley: migrate, an enterprise organization whose limits do not
	// throttle the run, then serve. The run's one organization may take the
	// whole turn queue (PARLEY_ORG_TURN_SHARE=100): it measures the
	// instance, and at 5,000 held streams the default share (half of
	// slots plus places, 4,096) would refuse the turns past --max-turns
	// instead of letting them wait.
	parleyEnv := append(os.Environ(),
		"PARLEY_ORG_TURN_SHARE=100",
		"PARLEY_DATABASE_URL="+e.dbURL,
		"PARLEY_OPENAI_API_KEY=sk-load",
		"PARLEY_OPENAI_BASE_URL="+e.modelURL+"/v1",
		"PARLEY_SECRETS_KEY="+secretsKey(),
		"PARLEY_MODELS_FILE=", "PARLEY_ANTHROPIC_API_KEY=", "PARLEY_GEMINI_API_KEY=", "PARLEY_REDIS_URL=",
	)
	if _, err := e.cmd(ctx, parleyEnv, "migrate"); err != nil {
		return nil, err
	}
	out, err := e.cmd(ctx, parleyEnv, "admin", "bootstrap", "--org", "Load", "--plan", "enterprise", "--json")
	if err != nil {
		return nil, err
	}
	var boot struct{ OrganizationID, APIKey string }
	if err := json.Unmarshal(out, &boot); err != nil || boot.APIKey == "" {
		return nil, fmt.Errorf("parley admin bootstrap printed %q: %v", out, err)
	}
	e.key = boot.APIKey
	if _, err := e.cmd(ctx, parleyEnv, "admin", "set-limits", "--org", boot.OrganizationID,
		"--per-minute", "2000000000", "--per-day", "2000000000"); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	e.parleyURL = "http://" + addr
	logf, err := os.Create(filepath.Join(e.tmp, "parley.log"))
	if err != nil {
		return nil, err
	}
	e.parley = exec.Command(c.parley, "serve", "--addr", addr, "--migrate=false")
	e.parley.Env = parleyEnv
	e.parley.Stdout, e.parley.Stderr = logf, logf
	if err := e.parley.Start(); err != nil {
		return nil, fmt.Errorf("starting %s serve: %w", c.parley, err)
	}
	e.parleyDone = make(chan error, 1)
	go func() { e.parleyDone <- e.parley.Wait(); logf.Close() }()
	if err := e.waitReady(ctx); err != nil {
		return nil, err
	}
	var agent struct{ ID string }
	if err := e.api(ctx, "POST", "/api/agents", `{"name":"load","instructions":"Be brief.","model":"gpt-4o-mini"}`, &agent); err != nil {
		return nil, err
	}
	e.agentID = agent.ID
	return e, nil
}

// freshDatabase drops and makes the run's database beside adminURL's, and
// returns its URL.
func freshDatabase(ctx context.Context, adminURL, name string) (string, error) {
	if name == "" || name == "parley" {
		return "", fmt.Errorf("--db %q: the run needs a database of its own", name)
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connecting to Postgres (make db): %w", err)
	}
	defer admin.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return "", err
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func (e *env) dropDatabase() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, e.cfg.adminURL)
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{e.cfg.dbName}.Sanitize()+" WITH (FORCE)")
}

func secretsKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// serve runs h on a loopback port of its own.
func (e *env) serve(h http.Handler) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	e.servers = append(e.servers, srv)
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), nil
}

// cmd runs a parley subcommand to its end and returns its standard output.
func (e *env) cmd(ctx context.Context, environ []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, e.cfg.parley, args...)
	cmd.Env = environ
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", e.cfg.parley, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func (e *env) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-e.parleyDone:
			return fmt.Errorf("parley serve exited (%v); its log: %s", err, filepath.Join(e.tmp, "parley.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := e.client.Get(e.parleyURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("parley serve was not ready within a minute; its log: %s", filepath.Join(e.tmp, "parley.log"))
}

// api makes one call of Parley's REST API with the run's key.
func (e *env) api(ctx context.Context, method, path, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, e.parleyURL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}

// peakRSS is Parley's VmHWM (the most resident memory it has held), and
// its resident memory now, from /proc.
func (e *env) rss() (peak, now string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.parley.Process.Pid))
	if err != nil {
		return "?", "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "kB" {
			switch f[0] {
			case "VmHWM:":
				peak = kb(f[1])
			case "VmRSS:":
				now = kb(f[1])
			}
		}
	}
	return peak, now
}

func kb(s string) string {
	var n int64
	fmt.Sscan(s, &n)
	return fmt.Sprintf("%.0f MiB", float64(n)/1024)
}

func (e *env) close() {
	if e.parley != nil && e.parley.Process != nil {
		_ = e.parley.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.parleyDone:
		case <-time.After(15 * time.Second):
			_ = e.parley.Process.Kill()
		}
	}
	for _, s := range e.servers {
		_ = s.Close()
	}
	if e.floorPool != nil {
		e.floorPool.Close()
	}
	if e.dbURL != "" && !e.cfg.keep {
		e.dropDatabase()
	}
}

// timeWait counts the sockets in TIME_WAIT to or from the fake model's port
// (/proc/net/tcp): connections Parley opened to the model and closed rather
// than kept for the next turn.
func (e *env) timeWait() int {
	u, err := url.Parse(e.modelURL)
	if err != nil {
		return -1
	}
	port := u.Port()
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] != "06" {
				continue
			}
			for _, addr := range fs[1:3] {
				if _, p, ok := strings.Cut(addr, ":"); ok && hexPort(p) == port {
					n++
					break
				}
			}
		}
	}
	return n
}

func hexPort(h string) string {
	var p int
	if _, err := fmt.Sscanf(h, "%X", &p); err != nil {
		return ""
	}
	return strconv.Itoa(p)
}
