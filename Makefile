# Parley. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

# Tools, pinned; `make tools` builds them into ./bin.
BUF_VERSION            := v1.75.0
SQLC_VERSION           := v1.31.1
PROTOC_GEN_GO_VERSION  := v1.36.12
CONNECT_GEN_VERSION    := v1.21.1

# An execution count, not a duration: Go 1.26's fuzz coordinator can report
# "context deadline exceeded" when a duration ends mid-run (golang/go#75804).
FUZZTIME ?= 100000x

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: db
db: ## Make a local Postgres with pgvector ready (role and database parley)
	@scripts/db-setup.sh

.PHONY: redis
redis: ## Make a local Redis ready on 127.0.0.1:6379 (used by the tests)
	@scripts/redis-setup.sh

.PHONY: chromium
chromium: ## Make headless Chromium ready (the console's browser tests)
	@scripts/chromium-setup.sh

.PHONY: build
build: ## Build bin/parley
	go build -o $(BIN)/parley ./backend/cmd/parley

IMAGE ?= parley:dev

.PHONY: image
image: ## Build the container image IMAGE (default parley:dev) with Docker; compose.yaml runs it
	@command -v docker >/dev/null || { echo "make image: docker is not installed on this machine; the image needs Docker (or another engine: docker build -t $(IMAGE) . with its own CLI)" >&2; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "make image: the docker CLI is here but reaches no Docker engine (is the daemon running, or DOCKER_HOST set?)" >&2; exit 1; }
	DOCKER_BUILDKIT=1 docker build -t $(IMAGE) .

.PHONY: run
run: db build ## Set up the database, migrate, create a demo organization, serve on :8080
	@$(BIN)/parley migrate
	@scripts/demo-org.sh $(BIN)/parley
	@# A development secrets key (sealing webhook secrets and http_request
	@# header values), made once and kept
	@# in .parley/ unless PARLEY_SECRETS_KEY is set.
	@mkdir -p .parley && [ -s .parley/secrets-key ] || (umask 077 && head -c 32 /dev/urandom | base64 > .parley/secrets-key)
	PARLEY_SECRETS_KEY="$${PARLEY_SECRETS_KEY:-$$(cat .parley/secrets-key)}" $(BIN)/parley serve

.PHONY: test
# make test runs the test binaries kept in build/test (scripts/test.sh says
# why: go test links every binary again on every run, and linking was most
# of a warm run). Test binaries link without DWARF or a symbol table (-s -w:
# half the link time); four packages run at once: their tests mostly wait
# on Postgres. TESTARGS go to every test binary: TESTARGS='-test.run X -test.v'.
TESTFLAGS ?= -count=1 -ldflags="-s -w"

test: db redis chromium ## Run the whole suite against the real Postgres, Redis and Chromium
	scripts/test.sh

# The race detector makes the suite about three times slower here (2 cores);
# CI runs both. backend/knowledge takes about ten minutes under it, go
# test's default bound for a package: 30m leaves it room (a hang still ends).
.PHONY: test-race
test-race: db redis chromium ## The whole suite under the race detector, with coverage
	go test $(TESTFLAGS) -race -cover -timeout 30m ./...

# Left out, run by hand with -fuzztime 10m: FuzzExtract (backend/knowledge;
# its inputs are whole PDF, DOCX and HTML files), and FuzzChunk, FuzzMarkdown,
# FuzzRobotsDiff (backend/knowledge), FuzzLocal (backend/llm) and
# FuzzPatternSize (backend/form), at 100 to 1,000 executions a second here:
# FUZZTIME of them would add half an hour to CI. Their seeds run in make test.
.PHONY: fuzz
fuzz: ## Run each fuzz test for FUZZTIME executions (default 100000x)
	go test -run '^$$' -fuzz '^FuzzDecodeAgentBodies$$' -fuzztime $(FUZZTIME) ./compat/wire
	go test -run '^$$' -fuzz '^FuzzDecodeChat$$' -fuzztime $(FUZZTIME) ./compat/wire
	go test -run '^$$' -fuzz '^FuzzFrame$$' -fuzztime $(FUZZTIME) ./compat/wire
	go test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./backend/apikey
	go test -run '^$$' -fuzz '^FuzzDecodeSubmission$$' -fuzztime $(FUZZTIME) ./backend/form
	go test -run '^$$' -fuzz '^FuzzNormalize$$' -fuzztime $(FUZZTIME) ./backend/phone
	go test -run '^$$' -fuzz '^FuzzAllowed$$' -fuzztime $(FUZZTIME) ./backend/netguard

.PHONY: bench
bench: db redis ## Run the benchmarks (figures go to docs/benchmarks.md)
	go test -run '^$$' -bench . -benchmem -count 5 ./backend/server/ ./backend/chat/ ./console/

# Flags of the load generator, e.g. LOAD_FLAGS="--duration 30s --held 2000,5000,10000";
# bin/parley-load --help lists them.
LOAD_FLAGS ?=

.PHONY: load
load: db build ## Load test: JSON chat (closed/open loop), SSE first token, held streams vs a fake model and an INSERT floor (about 2 minutes)
	go build -o $(BIN)/parley-load ./backend/cmd/parley-load
	$(BIN)/parley-load --parley $(BIN)/parley $(LOAD_FLAGS)

.PHONY: eval-knowledge
eval-knowledge: db ## Retrieval quality: hit@1, hit@5 and MRR per document and search method on testdata/eval (about 2 minutes)
	PARLEY_EVAL=1 go test -count=1 -run 'TestEval' -v -timeout 30m ./backend/knowledge/ | grep -v -e '^=== ' -e '^--- ' -e '^PASS' -e '^ok'

.PHONY: bench-knowledge
bench-knowledge: db ## Ingestion throughput, search p50/p95 and recall@10 at 100k chunks and on real English (about 12 minutes)
	go test -run '^$$' -bench 'Search$$/.*/(hybrid|vector)' -benchtime 200x -timeout 60m ./backend/knowledge/
	go test -run '^$$' -bench 'Search$$/.*/recall' -benchtime 1x -timeout 60m ./backend/knowledge/
	go test -run '^$$' -bench 'Ingest' -benchtime 5x ./backend/knowledge/
	go test -run '^$$' -bench 'Embed' -benchmem -benchtime 20x ./backend/embed/usel/
	go test -run '^$$' -bench 'NeuralRecall' -benchtime 1x -timeout 30m ./backend/knowledge/

.PHONY: tools
tools: $(BIN)/buf $(BIN)/sqlc $(BIN)/protoc-gen-go $(BIN)/protoc-gen-connect-go ## Build the pinned code generators into ./bin

$(BIN)/buf:
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/sqlc:
	GOBIN=$(BIN) go install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-connect-go:
	GOBIN=$(BIN) go install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(CONNECT_GEN_VERSION)

.PHONY: generate
generate: tools ## Regenerate protobuf, Connect, sqlc and templ code
	go run ./scripts/protodeps build/protodeps
	buf format -w
	buf generate
	sqlc generate
	go tool templ generate -path console

.PHONY: check-generate
check-generate: generate ## Fail when generated code is not fresh
	@if [ -n "$$(git status --porcelain)" ]; then \
	  echo "generated code is stale; run make generate and commit:"; git status --porcelain; git diff | head -50; exit 1; fi

.PHONY: lint
lint: tools ## go vet, staticcheck, gofmt, buf lint, buf format and templ fmt
	go run ./scripts/protodeps build/protodeps
	go vet ./...
	go tool staticcheck ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	buf lint
	buf format -d --exit-code proto
	go tool templ fmt -fail console

.PHONY: clean
clean: ## Remove build outputs
	rm -rf $(BIN) build
