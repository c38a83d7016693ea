// Command parley is the Parley service: `parley serve` runs the API,
// `parley migrate` applies the schema, `parley admin ...` are operator tasks.
// Run `parley help` for the list.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/parleyhq/parley/backend/account"
	"github.com/parleyhq/parley/backend/agent"
	"github.com/parleyhq/parley/backend/db"
	"github.com/parleyhq/parley/backend/db/dbq"
	"github.com/parleyhq/parley/backend/jobs"
	"github.com/parleyhq/parley/backend/member"
	"github.com/parleyhq/parley/backend/plan"
	"github.com/parleyhq/parley/backend/seal"
	"github.com/parleyhq/parley/backend/server"
	"github.com/parleyhq/parley/backend/telemetry"
	"github.com/parleyhq/parley/backend/webhook"
)

const usage = `parley: hosts AI agents.

Usage:
  parley serve [flags]        run the API server (parley serve --help)
  parley worker [flags]       run jobs only: ingestion, webhook deliveries (serve's flags; no HTTP);
                              --workers N jobs at once (default 4). parley serve --workers 0
                              serves without running jobs
  parley migrate [flags]      apply pending database migrations
  parley healthcheck [--url U] [--timeout D]
                              exit 0 when the instance answers /readyz with 200 within D
                              (default 3s; container health checks: the image has no shell nor curl)
  parley admin bootstrap --org NAME --plan free|starter|pro|enterprise [--email E] [--json]
                              create an organization, its first admin+chat API key and
                              its owner, with a one-time console sign-in link
  parley admin create-key --org ID [--name N] [--plan P] [--scopes admin,chat]
                              issue an API key for an organization (shown once)
  parley admin signin-link --org ID --email E
                              print a fresh one-time sign-in link for a member
  parley admin operator --email E [--off]
                              make a member a platform operator (/console/admin), or not
  parley admin set-limits --org ID --per-minute N --per-day N
                              set an enterprise organization's rate limits
  parley admin reseal [--secrets-key K] [--secrets-key-previous K1,K2] [--batch N]
                              seal every stored webhook secret and http_request header value
                              under the current secrets key (after a key rotation); fails when
                              a value opens under none of the keys given, naming where it is
  parley admin delete-org --org ID --confirm NAME [--batch N]
                              delete an organization and all of its data, in batches
                              (run it again to finish one interrupted)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal begins the graceful stop; a second one (Ctrl-C
	// again) ends the process at once, as signals do by default.
	go func() {
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // --help asked for, and given: not a failure
		}
		fmt.Fprintln(os.Stderr, "parley:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "worker":
		return worker(ctx, args[1:], stderr)
	case "migrate":
		return migrate(ctx, args[1:], stderr)
	case "healthcheck":
		return healthcheck(ctx, args[1:], stdout, stderr)
	case "admin":
		if len(args) < 2 {
			fmt.Fprint(stderr, usage)
			return errors.New("admin needs a subcommand")
		}
		switch args[1] {
		case "bootstrap":
			return bootstrap(ctx, args[2:], stdout, stderr)
		case "set-limits":
			return setLimits(ctx, args[2:], stdout, stderr)
		case "signin-link":
			return signinLink(ctx, args[2:], stdout, stderr)
		case "create-key":
			return createKey(ctx, args[2:], stdout, stderr)
		case "operator":
			return operator(ctx, args[2:], stdout, stderr)
		case "reseal":
			return reseal(ctx, args[2:], stdout, stderr)
		case "delete-org":
			return deleteOrg(ctx, args[2:], stdout, stderr)
		case "help", "-h", "--help":
			fmt.Fprint(stdout, usage)
			return nil
		}
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown admin command %q", args[1])
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// parse parses a command's flags and refuses any argument left over. The
// flag package stops at the first argument that is not a flag, so that a
// bool flag given a separate value (--migrate false, --off false) was set to
// true, and every flag after it was silently dropped (--database-url too).
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q (a bool flag takes its value as --flag=false)", fs.Name(), fs.Arg(0))
	}
	return nil
}

func setupLogging(level string, w io.Writer) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	slog.SetDefault(slog.New(server.LogHandler{Handler: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})}))
	return nil
}

// setupTracing installs OpenTelemetry tracing when OTEL_EXPORTER_OTLP_ENDPOINT
// is set (telemetry.Setup); stop flushes the spans still buffered.
func setupTracing(ctx context.Context) (stop func(), err error) {
	shutdown, err := telemetry.Setup(ctx)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			slog.Warn("flushing traces", "err", err)
		}
	}, nil
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg server.Config
	cfg.Flags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := setupLogging(cfg.LogLevel, stderr); err != nil {
		return err
	}
	stopTracing, err := setupTracing(ctx)
	if err != nil {
		return err
	}
	defer stopTracing()
	app, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer app.Close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(ctx, app, cfg.MetricsAddr)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopMetrics()
	return app.Serve(ctx, ln)
}

// serveMetrics serves the metrics on addr (none when it is empty) until
// ctx ends or stop is called; stop waits for the listener to close.
func serveMetrics(ctx context.Context, app *server.App, addr string) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := app.ServeMetrics(ctx, ln); err != nil {
			slog.Error("serving metrics", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// worker runs ingestion jobs without serving HTTP, to scale them apart.
func worker(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg server.Config
	cfg.Flags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if cfg.Workers == 0 {
		return errors.New("parley worker runs jobs only: --workers (PARLEY_WORKERS) must be 1 or more")
	}
	// A worker listens on no API address (--addr is the server's), so its
	// metrics may take the port a server's API would: :8080 included.
	cfg.Addr = ""
	if err := setupLogging(cfg.LogLevel, stderr); err != nil {
		return err
	}
	stopTracing, err := setupTracing(ctx)
	if err != nil {
		return err
	}
	defer stopTracing()
	app, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer app.Close()
	stopMetrics, err := serveMetrics(ctx, app, cfg.MetricsAddr)
	if err != nil {
		return err
	}
	defer stopMetrics()
	slog.Info("running jobs", "workers", cfg.Workers)
	return app.RunWorkers(ctx)
}

// dbFlags registers --database-url with the same default as serve.
func dbFlags(fs *flag.FlagSet) *string {
	var cfg server.Config
	cfg.Flags(flag.NewFlagSet("", flag.ContinueOnError))
	url := new(string)
	server.URLVar(fs, url, "database-url", cfg.DatabaseURL, "Postgres URL (PARLEY_DATABASE_URL or DATABASE_URL)")
	return url
}

func migrate(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := dbFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	res, err := db.Migrate(ctx, *url)
	if err != nil {
		return err
	}
	for _, r := range res {
		fmt.Fprintf(stderr, "applied %s in %s\n", r.Source.Path, r.Duration)
	}
	fmt.Fprintf(stderr, "database is up to date (%d applied now)\n", len(res))
	return nil
}

// healthcheck asks an instance whether it is ready, for container health
// checks (the image is distroless: no shell, no curl). The default URL is
// this container's own /readyz, on the port of PARLEY_ADDR.
func healthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg server.Config
	cfg.Flags(flag.NewFlagSet("", flag.ContinueOnError))
	url := fs.String("url", readyURL(cfg.Addr), "the URL to ask; ready when it answers 200")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return fmt.Errorf("--url %q: %w", *url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: %s answered %d: %s", *url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	fmt.Fprint(stdout, string(body))
	return nil
}

// readyURL is /readyz on loopback at the port of a listen address (":8080",
// "0.0.0.0:8080", "[::]:9000").
func readyURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "http://127.0.0.1:8080/readyz"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz"
}

func openStore(ctx context.Context, url string) (*db.Store, func(), error) {
	// An admin command migrates the database as serve does, unless
	// PARLEY_MIGRATE is false (instances that leave it to `parley
	// migrate`): then one finding migrations pending stops, rather than
	// migrate a production database by the way.
	var cfg server.Config
	cfg.Flags(flag.NewFlagSet("", flag.ContinueOnError))
	// An unreadable variable (PARLEY_MIGRATE=no) stops here as it stops
	// serve, rather than count as its default (true: migrate). Settings
	// only a server uses are not checked: PARLEY_EMBEDDINGS=openai without
	// its key stopped `parley admin signin-link`, which embeds nothing.
	if err := cfg.EnvErr(); err != nil {
		return nil, nil, err
	}
	if !cfg.Migrate {
		n, err := db.Pending(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		if n > 0 {
			return nil, nil, fmt.Errorf("the database has %d migrations to apply and PARLEY_MIGRATE is false: run `parley migrate` first", n)
		}
	} else if _, err := db.Migrate(ctx, url); err != nil {
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	pool, err := db.Open(ctx, url, 2, nil)
	if err != nil {
		return nil, nil, err
	}
	return &db.Store{Pool: pool}, pool.Close, nil
}

func bootstrap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley admin bootstrap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := dbFlags(fs)
	org := fs.String("org", "", "organization name (required)")
	p := fs.String("plan", plan.Free, "plan: free, starter, pro or enterprise")
	email := fs.String("email", "", "the owner's email (default: owner-<id>@parley.localhost, to be changed)")
	public := publicURLFlag(fs)
	asJSON := fs.Bool("json", false, `print exactly {"organizationId":"...","apiKey":"...","ownerEmail":"...","signInUrl":"..."}`)
	if err := parse(fs, args); err != nil {
		return err
	}
	if *org == "" {
		return errors.New("--org is required")
	}
	if err := account.CheckOrgName(*org); err != nil {
		return fmt.Errorf("--org: %w", err)
	}
	if !plan.Valid(*p) {
		return fmt.Errorf("--plan %q: use free, starter, pro or enterprise", *p)
	}
	if err := server.CheckPublicURL(*public); err != nil {
		return err
	}
	if *email != "" {
		norm, err := emailFlag(*email)
		if err != nil {
			return err
		}
		*email = norm
	}
	store, closeFn, err := openStore(ctx, *url)
	if err != nil {
		return err
	}
	defer closeFn()
	members := &member.Service{Store: store}
	if *email != "" {
		if err := members.EmailFree(ctx, *email); err != nil {
			return err
		}
	}
	id, key, err := account.Bootstrap(ctx, store, *org, *p)
	if err != nil {
		return err
	}
	if *email == "" {
		// The whole id: its first digits are a time (UUIDv7) and repeat
		// for a minute, and two organizations then shared one email.
		*email = "owner-" + id.String() + "@parley.localhost"
	}
	if _, err := members.CreateOwner(ctx, id, *email); err != nil {
		return fmt.Errorf("organization %s was created, but not its owner: %w", id, err)
	}
	token, err := members.SignInLink(ctx, id, *email)
	if err != nil {
		return err
	}
	link := signinURL(*public, token)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			OrganizationID string `json:"organizationId"`
			APIKey         string `json:"apiKey"`
			OwnerEmail     string `json:"ownerEmail"`
			SignInURL      string `json:"signInUrl"`
		}{id.String(), key, *email, link})
	}
	fmt.Fprintf(stdout, "organization %s (%s plan)\nAPI key (shown once, keep it): %s\nowner: %s\nsign in (once, within %s): %s\n",
		id, *p, key, *email, member.LinkTTL, link)
	return nil
}

// emailFlag is --email normalized, or an error naming the flag: checked
// before the database is opened (and migrated).
func emailFlag(v string) (string, error) {
	email, err := member.NormalizeEmail(v)
	if err != nil {
		return "", fmt.Errorf("--email %q: not an email address", v)
	}
	return email, nil
}

// publicURLFlag registers --public-url with serve's default.
func publicURLFlag(fs *flag.FlagSet) *string {
	var cfg server.Config
	cfg.Flags(flag.NewFlagSet("", flag.ContinueOnError))
	return fs.String("public-url", cfg.PublicURL, "the console's public address, for links (PARLEY_PUBLIC_URL)")
}

func signinURL(public, token string) string {
	return strings.TrimRight(public, "/") + "/console/link?token=" + token
}

// createKey issues a key for an organization (one that lost its keys).
func createKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley admin create-key", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := dbFlags(fs)
	org := fs.String("org", "", "organization id (required)")
	name := fs.String("name", "operator-issued", "the key's name")
	p := fs.String("plan", "", "the key's plan (default: the organization's)")
	scopes := fs.String("scopes", "admin,chat", "comma-separated scopes: admin, chat")
	if err := parse(fs, args); err != nil {
		return err
	}
	id, err := uuid.Parse(*org)
	if err != nil {
		return fmt.Errorf("--org %q is not an organization id", *org)
	}
	// An unknown plan would be refused as "higher than the organization's".
	if *p != "" && !plan.Valid(*p) {
		return fmt.Errorf("--plan %q: use free, starter, pro or enterprise", *p)
	}
	keyScopes := strings.Split(*scopes, ",")
	if err := account.CheckNewKey(*name, keyScopes); err != nil {
		return fmt.Errorf("--%w", err) // "--name: ...", "--scopes: ..."
	}
	store, closeFn, err := openStore(ctx, *url)
	if err != nil {
		return err
	}
	defer closeFn()
	key, err := account.CreateKey(ctx, store, id, *name, *p, keyScopes)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "API key (shown once, keep it): %s\n", key)
	return nil
}

// signinLink prints a fresh one-time sign-in link (a lost password).
func signinLink(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley admin signin-link", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := dbFlags(fs)
	org := fs.String("org", "", "organization id (required)")
	email := fs.String("email", "", "the member's email (required)")
	public := publicURLFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	id, err := uuid.Parse(*org)
	if err != nil {
		return fmt.Errorf("--org %q is not an organization id", *org)
	}
	if err := server.CheckPublicURL(*public); err != nil {
		return err
	}
	if _, err := emailFlag(*email); err != nil {
		return err
	}
	store, closeFn, err := openStore(ctx, *url)
	if err != nil {
		return err
	}
	defer closeFn()
	token, err := (&member.Service{Store: store}).SignInLink(ctx, id, *email)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, signinURL(*public, token))
	return nil
}

// operator makes a member a platform operator, or no longer one.
func operator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley admin operator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := dbFlags(fs)
	email := fs.String("email", "", "the member's email (required)")
	off := fs.Bool("off", false, "take the operator flag away")
	if err := parse(fs, args); err != nil {
		return err
	}
	if _, err := emailFlag(*email); err != nil {
		return err
	}
	store, closeFn, err := openStore(ctx, *url)
	if err != nil {
		return err
	}
	defer closeFn()
	m, err := (&member.Service{Store: store}).SetOperator(ctx, *email, !*off)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s operator: %t\n", m.Email, m.Operator)
	return nil
}

func setLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley admin set-limits", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := dbFlags(fs)
	org := fs.String("org", "", "organization id (required)")
	perMinute := fs.Int64("per-minute", 0, "requests per minute per key")
	perDay := fs.Int64("per-day", 0, "requests per day per key")
	if err := parse(fs, args); err != nil {
		return err
	}
	id, err := uuid.Parse(*org)
	if err != nil {
		return fmt.Errorf("--org %q is not an organization id", *org)
	}
	if *perMinute <= 0 || *perDay <= 0 {
		return fmt.Errorf("--per-minute %d, --per-day %d: both are required, positive counts", *perMinute, *perDay)
	}
	store, closeFn, err := openStore(ctx, *url)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := account.SetLimits(ctx, store, id, plan.Limits{PerMinute: *perMinute, PerDay: *perDay}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "organization %s: %d requests per minute, %d per day per key\n", id, *perMinute, *perDay)
	return nil
}

// reseal seals every organization's stored secrets under the current
// secrets key, after the key was changed (docs/operations.md, "Rotating the
// secrets key"). It may be run again: what is already under the current
// key is left as it is.
func reseal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley admin reseal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := dbFlags(fs)
	var cfg server.Config
	cfg.Flags(flag.NewFlagSet("", flag.ContinueOnError))
	server.SecretVar(fs, &cfg.SecretsKey, "secrets-key", cfg.SecretsKey,
		"the current secrets key, which every value is sealed under (PARLEY_SECRETS_KEY)")
	server.SecretVar(fs, &cfg.SecretsKeyPrevious, "secrets-key-previous", cfg.SecretsKeyPrevious,
		"the earlier secrets keys, comma-separated, which values may still be sealed under (PARLEY_SECRETS_KEY_PREVIOUS)")
	batch := fs.Int("batch", 100, "rows resealed a transaction")
	if err := parse(fs, args); err != nil {
		return err
	}
	if cfg.SecretsKey == "" {
		return errors.New("--secrets-key (PARLEY_SECRETS_KEY) is required: the key to seal every value under")
	}
	if *batch < 1 || *batch > 10000 {
		return fmt.Errorf("--batch %d: a count of rows from 1 to 10000", *batch)
	}
	sealer, err := cfg.Sealer()
	if err != nil {
		return err
	}
	store, closeFn, err := openStore(ctx, *url)
	if err != nil {
		return err
	}
	defer closeFn()
	n := int32(*batch)
	var secrets, headers seal.Tally
	var unopenable []string
	err = organizations(ctx, store, n, func(org uuid.UUID) error {
		t, lost, err := webhook.Reseal(ctx, store, sealer, org, n)
		if err != nil {
			return fmt.Errorf("organization %s: webhook secrets: %w", org, err)
		}
		secrets = secrets.Plus(t)
		for _, id := range lost {
			unopenable = append(unopenable, fmt.Sprintf("organization %s webhook %s", org, id))
		}
		t, where, err := agent.Reseal(ctx, store, sealer, org, n)
		if err != nil {
			return fmt.Errorf("organization %s: http_request header values: %w", org, err)
		}
		headers = headers.Plus(t)
		for _, w := range where {
			unopenable = append(unopenable, fmt.Sprintf("organization %s %s", org, w))
		}
		return nil
	})
	// What was resealed is committed, error or not: the counts say so.
	for _, c := range []struct {
		what string
		t    seal.Tally
	}{{"webhook signing secrets", secrets}, {"http_request header values", headers}} {
		fmt.Fprintf(stdout, "%s: %d resealed, %d already current, %d unopenable\n", c.what, c.t.Resealed, c.t.Current, c.t.Unopenable)
	}
	for _, u := range unopenable {
		fmt.Fprintf(stdout, "unopenable, left as it is: %s\n", u)
	}
	if err != nil {
		return err
	}
	if len(unopenable) > 0 {
		return fmt.Errorf("%d sealed values open under none of the keys given (listed above; left as they are): add the key that sealed them to --secrets-key-previous, or set them again (rotate the webhook's secret, set the agent's header values)", len(unopenable))
	}
	return nil
}

// organizations calls fn with each organization's id in turn, reading
// them a page of batch at a time.
func organizations(ctx context.Context, store *db.Store, batch int32, fn func(org uuid.UUID) error) error {
	for after := uuid.Nil; ; {
		var page []uuid.UUID
		err := store.CommandLineOrganizations(ctx, func(q *dbq.Queries) error {
			var err error
			page, err = q.CommandLineOrganizations(ctx, dbq.CommandLineOrganizationsParams{After: after, MaxRows: batch})
			return err
		})
		if err != nil {
			return err
		}
		for _, org := range page {
			if err := fn(org); err != nil {
				return err
			}
		}
		if len(page) < int(batch) {
			return nil
		}
		after = page[len(page)-1]
	}
}

// deleteOrg deletes an organization and everything of it
// (account.Deleter.DeleteOrg), printing each batch to stderr as it commits
// and the counts to stdout at the end.
func deleteOrg(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("parley admin delete-org", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := dbFlags(fs)
	org := fs.String("org", "", "organization id (required)")
	confirm := fs.String("confirm", "", "the organization's name, exactly (required)")
	batch := fs.Int("batch", account.DefaultDeleteBatch, "rows deleted per transaction")
	if err := parse(fs, args); err != nil {
		return err
	}
	id, err := uuid.Parse(*org)
	if err != nil {
		return fmt.Errorf("--org %q is not an organization id", *org)
	}
	if *confirm == "" {
		return errors.New("--confirm is required: the organization's name, exactly")
	}
	if *batch <= 0 || *batch > 1_000_000 {
		return fmt.Errorf("--batch %d: give 1 to 1000000 rows", *batch)
	}
	store, closeFn, err := openStore(ctx, *url)
	if err != nil {
		return err
	}
	defer closeFn()
	// Enqueues nothing and runs nothing: it deletes the organization's jobs.
	jc, err := jobs.New(store.Pool, nil, jobs.Config{})
	if err != nil {
		return err
	}
	d := &account.Deleter{Store: store, Jobs: jc, Batch: *batch, Progress: func(what string, n int64) {
		fmt.Fprintf(stderr, "deleted %d %s\n", n, what)
	}}
	deleted, err := d.DeleteOrg(ctx, id, *confirm)
	if err != nil {
		if len(deleted) > 0 {
			return fmt.Errorf("organization %s is partly deleted (run the command again to finish): %w", id, err)
		}
		return err
	}
	fmt.Fprintf(stdout, "organization %s (%q) deleted; recorded in the operator audit log:\n", id, *confirm)
	for _, c := range deleted {
		fmt.Fprintf(stdout, "  %-20s %d\n", c.What, c.N)
	}
	return nil
}
