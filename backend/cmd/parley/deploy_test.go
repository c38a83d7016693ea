package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/parleyhq/parley/backend/server"
)

// The repository's root, from this package's directory.
const repoRoot = "../../.."

type composeFile struct {
	Services map[string]composeService
	Volumes  map[string]any
}

type composeService struct {
	Image       string
	Build       any
	Command     []string
	Environment map[string]string
	Ports       []string
	Restart     string
	Healthcheck struct {
		Test []string
	}
	DependsOn map[string]struct {
		Condition string
	} `yaml:"depends_on"`
}

// interpolate replaces compose's ${NAME:-default} with the default (what
// `docker compose` does with NAME unset); any other form of $ fails.
func interpolate(t *testing.T, s string) string {
	t.Helper()
	out := regexp.MustCompile(`\$\{[A-Z_]+:-([^}]*)\}`).ReplaceAllString(s, "$1")
	require.NotContains(t, out, "$", "only ${NAME:-default} is understood here")
	return out
}

// compose.yaml describes the deployment of docs/scaling.md, and every
// parley command, flag and variable in it is one the binary knows: each
// command is parsed by the real subcommand (up to --help, so nothing runs)
// with the service's environment set, as in its container.
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "compose.yaml"))
	require.NoError(t, err)
	var cf composeFile
	require.NoError(t, yaml.Unmarshal(raw, &cf))

	names := slices.Sorted(func(yield func(string) bool) {
		for n := range cf.Services {
			if !yield(n) {
				return
			}
		}
	})
	require.Equal(t, []string{"api-1", "api-2", "migrate", "postgres", "redis", "worker"}, names)
	require.Regexp(t, `^pgvector/pgvector:(0\.8\.\d+-)?pg1[5-9]$`, cf.Services["postgres"].Image)
	require.Regexp(t, `^redis:`, cf.Services["redis"].Image)
	for _, infra := range []string{"postgres", "redis"} {
		require.NotEmpty(t, cf.Services[infra].Healthcheck.Test, "%s has a health check, for depends_on", infra)
	}

	known := knownVariables(t)
	parley := map[string]composeService{}
	for name, s := range cf.Services {
		if strings.HasPrefix(name, "api-") || name == "migrate" || name == "worker" {
			parley[name] = s
		}
	}
	image := parley["migrate"].Image
	require.NotEmpty(t, image)
	for name, s := range parley {
		require.Equal(t, image, s.Image, "%s runs the same image", name)
		require.NotNil(t, s.Build, "%s builds from the Dockerfile", name)
		require.Equal(t, "service_healthy", s.DependsOn["postgres"].Condition, name)
		for k, v := range s.Environment {
			require.Contains(t, known, k, "%s: Parley reads no variable %s", name, k)
			s.Environment[k] = interpolate(t, v)
		}
		require.Equal(t, "postgres://parley:parley@postgres:5432/parley?sslmode=disable", s.Environment["PARLEY_DATABASE_URL"],
			"%s: Parley's own role (not the superuser) on the postgres service", name)
	}

	// The one-shot migration comes first.
	mig := parley["migrate"]
	require.Equal(t, []string{"migrate"}, mig.Command)
	require.Equal(t, "no", mig.Restart, "a one-shot service")
	require.Equal(t, "false", parley["api-1"].Environment["PARLEY_MIGRATE"], "instances leave the schema to migrate")

	// Two API instances that run no jobs, on their own host ports, checked
	// by /readyz; one worker that runs them.
	hostPorts := map[string]bool{}
	for _, name := range []string{"api-1", "api-2"} {
		s := parley[name]
		require.Equal(t, "serve", s.Command[0], name)
		cfg := parseConfig(t, s)
		require.Zero(t, cfg.Workers, "%s runs no jobs", name)
		require.False(t, cfg.Migrate, name)
		require.NotEmpty(t, cfg.RedisURL, "%s counts rate limits in Redis, shared", name)
		require.Len(t, s.Ports, 1, name)
		host, container, ok := strings.Cut(s.Ports[0], ":")
		require.True(t, ok, name)
		require.Equal(t, "8080", container, "%s: the image listens on 8080", name)
		require.False(t, hostPorts[host], "%s: host port %s taken twice", name, host)
		hostPorts[host] = true
		require.Equal(t, "http://localhost:"+host, cfg.PublicURL, name)

		require.Equal(t, "CMD", s.Healthcheck.Test[0], name)
		require.Equal(t, "/usr/local/bin/parley", s.Healthcheck.Test[1], name)
		hc := s.Healthcheck.Test[2:]
		require.Equal(t, "healthcheck", hc[0])
		require.Equal(t, "http://127.0.0.1:8080/readyz", readyURL(cfg.Addr), "%s: the health check asks the instance's own /readyz", name)
		parses(t, s, hc)

		require.Equal(t, "service_completed_successfully", s.DependsOn["migrate"].Condition, name)
		require.Equal(t, "service_healthy", s.DependsOn["redis"].Condition, name)
	}
	w := parley["worker"]
	require.Equal(t, "worker", w.Command[0])
	require.Positive(t, parseConfig(t, w).Workers, "the worker runs jobs")
	require.Equal(t, "service_completed_successfully", w.DependsOn["migrate"].Condition)
	require.Empty(t, w.Ports, "the worker serves no HTTP")

	for _, s := range parley {
		parses(t, s, s.Command)
	}

	// Postgres's first start makes Parley's role, which must not bypass
	// row-level security.
	initdb, err := os.ReadFile(filepath.Join(repoRoot, "deploy/initdb.sh"))
	require.NoError(t, err)
	require.Regexp(t, `CREATE ROLE parley LOGIN NOSUPERUSER NOBYPASSRLS`, string(initdb))
	require.Contains(t, string(initdb), "CREATE EXTENSION IF NOT EXISTS vector")
	require.Contains(t, string(raw), "./deploy/initdb.sh:/docker-entrypoint-initdb.d/")
}

// The image is the one compose.yaml expects: a static Go build, a non-root
// final stage without a shell, parley as the entry point at the path the
// health checks run.
func TestDockerfile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	require.NoError(t, err)
	df := string(raw)
	var froms []string
	for _, l := range strings.Split(df, "\n") {
		if strings.HasPrefix(l, "FROM ") {
			froms = append(froms, l)
		}
	}
	require.Len(t, froms, 2, "a builder stage and the final one")
	require.Contains(t, froms[0], "golang:")
	require.Regexp(t, `^FROM (gcr\.io/distroless/static\S*|scratch)$`, froms[1])
	require.Contains(t, df, "CGO_ENABLED=0")
	require.Contains(t, df, "--mount=type=cache,target=/go/pkg/mod")
	require.Contains(t, df, "go build")
	require.Contains(t, df, "./backend/cmd/parley")
	final := df[strings.LastIndex(df, "FROM "):]
	user := regexp.MustCompile(`(?m)^USER (\S+)$`).FindStringSubmatch(final)
	require.NotNil(t, user, "the final stage names its user")
	require.NotRegexp(t, `^(0|root)(:|$)`, user[1])
	require.Contains(t, final, "COPY --from=build /out/parley /usr/local/bin/parley")
	require.Contains(t, final, `ENTRYPOINT ["/usr/local/bin/parley"]`)
	require.Contains(t, final, "EXPOSE 8080")

	// `go mod download` runs before the sources are copied: every module
	// go.mod replaces with a directory has its go.mod copied before it
	// (found by building the image with podman, scripts/image-local.sh).
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	require.NoError(t, err)
	download := regexp.MustCompile(`(?m)^\s+go mod download$`).FindStringIndex(df)
	require.NotNil(t, download, "the builder downloads the modules in a step of its own")
	for _, m := range regexp.MustCompile(`(?m)^replace \S+ => \./(\S+)$`).FindAllStringSubmatch(string(gomod), -1) {
		at := strings.Index(df, "COPY "+m[1]+"/go.mod ")
		require.True(t, at >= 0 && at < download[0], "the Dockerfile copies %s/go.mod before go mod download", m[1])
	}

	// The builder is given what the binary embeds (go:embed), and none of
	// it is excluded by .dockerignore.
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	require.NoError(t, err)
	for _, l := range strings.Split(string(ignore), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		for _, embedded := range []string{"backend/embed/usel/model.bin", "migrations/00001_foundation.sql", "compat/openapi.json", "console/static", "go.mod", "go.sum"} {
			matched, err := filepath.Match(strings.TrimPrefix(l, "**/"), filepath.Base(embedded))
			require.NoError(t, err)
			require.False(t, matched || strings.HasPrefix(embedded, l+"/") || embedded == l, ".dockerignore's %q excludes %s", l, embedded)
		}
	}
}

// parseConfig reads a serve or worker command as the instance would.
func parseConfig(t *testing.T, s composeService) server.Config {
	t.Helper()
	for k, v := range s.Environment {
		t.Setenv(k, v)
	}
	var cfg server.Config
	flags := flag.NewFlagSet(s.Command[0], flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	cfg.Flags(flags)
	require.NoError(t, flags.Parse(s.Command[1:]), "%v", s.Command)
	require.Empty(t, flags.Args(), "%v: arguments the command ignores", s.Command)
	require.NoError(t, cfg.Err(), "%v", s.Command)
	return cfg
}

// parses runs args through the real subcommand with --help appended: the
// subcommand and every flag before it exist when the answer is ErrHelp.
// (An argument that ends the flags would let the command run; the context
// is cancelled so that it stops at once, and the test fails.)
func parses(t *testing.T, s composeService, args []string) {
	t.Helper()
	for k, v := range s.Environment {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := run(ctx, append(slices.Clone(args), "--help"), io.Discard, io.Discard)
	require.True(t, errors.Is(err, flag.ErrHelp), "parley %v: %v", args, err)
}

// knownVariables is every PARLEY_* variable Parley reads: those its flags
// name, and those the code reads by name (provider keys).
func knownVariables(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	re := regexp.MustCompile(`PARLEY_[A-Z0-9_]+`)
	var cfg server.Config
	flags := flag.NewFlagSet("", flag.ContinueOnError)
	cfg.Flags(flags)
	flags.VisitAll(func(f *flag.Flag) {
		for _, v := range re.FindAllString(f.Usage, -1) {
			known[v] = true
		}
	})
	quoted := regexp.MustCompile(`"(PARLEY_[A-Z0-9_]+)"`)
	err := filepath.WalkDir(filepath.Join(repoRoot, "backend"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range quoted.FindAllStringSubmatch(string(b), -1) {
			known[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, known["PARLEY_DATABASE_URL"] && known["PARLEY_OPENAI_API_KEY"], "the scan finds variables")
	return known
}
