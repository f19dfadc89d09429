# Weir — build, run and test. Tools are pinned and installed into ./bin.
GO ?= go
BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
STATICCHECK_VERSION := v0.8.2

# Packages whose tests run in `make test`. The -race test run covers every
# package; the process-level integration tests live in the packages
# under ./test (the kit: clustertest, proxytest, polltest, testbin).
PKGS := ./...

.PHONY: all build run test postgres chromium check-static test-unit test-integration bench proto proto-check lint vet clean chaos soak bigstate fuzz state-long

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# Starts a local cluster (a jobmanager and two taskmanagers), submits the
# example window job, waits for it and shows its output.
run: build
	./scripts/run.sh

# The process tests (test/...) start the race-built test binaries of
# test/testbin, built here once for all of their packages.
test: vet $(BIN)/versitygw postgres chromium
	$(GO) build -race -o $(BIN)/testbin-race/ ./test/testbin/jobmanager ./test/testbin/taskmanager ./test/testbin/weir
	WEIR_TEST_BINARIES=$(BIN)/testbin-race $(GO) test -race -count=1 -timeout 20m $(PKGS)

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Runs every fuzz target in the repository for FUZZTIME each (default 20s),
# one target at a time, after its committed seed corpus in
# testdata/fuzz/<FuzzName>/; prints one line per target and fails if any
# target fails. FUZZ selects targets by an extended regexp on "pkg
# FuzzName" (make fuzz FUZZ=FuzzREST), FUZZPARALLEL sets the fuzzing
# processes per target. Logs are in .run/fuzz/.
FUZZTIME ?= 20s
fuzz:
	@FUZZTIME='$(FUZZTIME)' FUZZ='$(FUZZ)' FUZZPARALLEL='$(FUZZPARALLEL)' FUZZMINIMIZETIME='$(FUZZMINIMIZETIME)' GO='$(GO)' ./scripts/fuzz.sh

# The long chaos run, sized by work: 50 taskmanager kills (WEIR_CHAOS_KILLS;
# half of them restarted on the same port) and 5 SIGSTOP/SIGCONT pauses
# against a 3-taskmanager cluster, 10 same-port restarts with every slot in
# use, then the HA tests with 20 SIGKILLs of the leading jobmanager
# (WEIR_HA_KILLS), a paused leader and an etcd restart; `make test` runs
# short versions of the same tests.
chaos: $(BIN)/versitygw
	@mkdir -p .run
	@WEIR_CHAOS_KILLS=$${WEIR_CHAOS_KILLS:-50} WEIR_HA_KILLS=$${WEIR_HA_KILLS:-20} \
		$(GO) test -count=1 -v -timeout 60m -p 1 -run 'TestChaos|TestSamePort|TestHA' ./test/chaos/ ./test/ha/ > .run/chaos.log 2>&1; rc=$$?; \
		grep -E '^(kills=|same_port_|takeovers=|--- |ok|FAIL)' .run/chaos.log; echo "full log: .run/chaos.log"; exit $$rc

# A sliding window on Pebble with 1,000,000 keys (WEIR_BIGSTATE_KEYS), its
# state many times the taskmanagers' 512 KiB of state cache, through a
# taskmanager SIGKILL; every window checked. `make test` runs 4,000 keys.
bigstate: $(BIN)/versitygw
	@mkdir -p .run
	@WEIR_BIGSTATE_KEYS=$${WEIR_BIGSTATE_KEYS:-1000000} \
		$(GO) test -count=1 -v -timeout 60m -run 'TestWindowBigState' ./test/state/ > .run/bigstate.log 2>&1; rc=$$?; \
		grep -E '^(window_bigstate |--- |ok|FAIL)' .run/bigstate.log; echo "full log: .run/bigstate.log"; exit $$rc

# The keyed-state backend tests at their full sizes (all seeds and steps of
# the randomised model and differential tests, 16 MB beyond the caches,
# every database syncing); `make test` runs them shorter, with every check.
state-long:
	WEIR_LONG_TESTS=1 $(GO) test -race -count=1 -timeout 60m ./statebackend/...

# The soak: a random mix of every fault (taskmanager kills and pauses,
# partitions, S3 outages, leader kills, leaders cut off from etcd, and the
# leader member of the three-member etcd killed or a member cut off) for
# WEIR_SOAK_DURATION (default 1h), reporting per WEIR_SOAK_WINDOW (10m):
# faults, lost and duplicated rows, recovery and checkpoint durations,
# orphaned objects, and RSS, file descriptors and goroutines per process.
soak: $(BIN)/versitygw
	@mkdir -p .run
	@WEIR_SOAK_DURATION=$${WEIR_SOAK_DURATION:-1h} \
		$(GO) test -count=1 -v -timeout 0 -run 'TestSoak' ./test/storage/ > .run/soak.log 2>&1; rc=$$?; \
		grep -E '^(soak_window=|--- |ok|FAIL)' .run/soak.log; echo "full log: .run/soak.log"; exit $$rc

bench: build $(BIN)/versitygw postgres
	./scripts/bench.sh

# Nexmark q0-q5, q7-q9, q11, q12 on a local cluster (WEIR_NEXMARK_EVENTS, default 10
# million per query); writes docs/benchmarks.md.
bench-nexmark: build
	WEIR_BENCH=Nexmark ./scripts/bench.sh

$(BIN)/buf:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(BIN)/staticcheck:
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Regenerates the protobuf code from proto/weirpb/*.proto.
proto: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc
	cd proto && $(BIN)/buf generate

# Fails if the committed generated code is not what `make proto` produces.
proto-check: proto
	git diff --exit-code -- proto/

lint: vet $(BIN)/staticcheck
	$(BIN)/staticcheck ./...

clean:
	rm -rf $(BIN) .run

# --- PostgreSQL: the server binaries that the tests of connectors/postgres
# and test/pipeline start by themselves (internal/pgtest) in temporary data
# directories on free ports. Installed from Debian's packages when missing
# (as root); WEIR_SKIP_POSTGRES=1 skips the step and those tests. ---
postgres:
	@if [ "$${WEIR_SKIP_POSTGRES:-}" = 1 ]; then echo "WEIR_SKIP_POSTGRES=1: PostgreSQL tests skipped"; else ./scripts/ensure-postgres.sh >/dev/null; fi

# --- Chromium: the headless browser that the web UI's end-to-end test
# (test/ui) drives. Installed from Debian's packages when missing (as root);
# WEIR_SKIP_UI=1 skips the step and that test. ---
chromium:
	@if [ "$${WEIR_SKIP_UI:-}" = 1 ]; then echo "WEIR_SKIP_UI=1: web UI browser test skipped"; else ./scripts/ensure-chromium.sh >/dev/null; fi

# Builds the three binaries static (CGO_ENABLED=0) and checks that they are;
# deploy/kubernetes/Dockerfile builds them the same way.
check-static:
	WEIR_TEST_STATIC_BUILD=1 $(GO) test -count=1 -timeout 20m -run TestStaticBuild ./deploy/kubernetes/

# --- versitygw: the S3 server that the blobstore/s3store and checkpoint tests
# start by themselves (blobstoretest.StartVersityGW looks for bin/versitygw). ---
VERSITYGW_VERSION := v1.8.0
$(BIN)/versitygw:
	GOBIN=$(BIN) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
bin/versitygw: $(BIN)/versitygw
