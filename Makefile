# flashsale — see README.md.
GO      ?= go
PKGS    := ./...
BIN     := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# Every build and test without the checkout's path in it: the build cache
# then serves a clone at any path (CI's fresh clone reuses what the last
# run compiled, instead of compiling the project's packages again in each
# of the vet's, the race detector's and the fuzzer's configurations).
export GOFLAGS := -trimpath $(GOFLAGS)
LDFLAGS := -X github.com/flashsale/flashsale/pkg/app.Version=$(VERSION) -X github.com/flashsale/flashsale/pkg/app.Commit=$(COMMIT)

.PHONY: all build bench bench-allocs static test test-short lint servers demo dev chaos dataloss helm helm-test fuzz clean

all: build

## build: the binaries into ./bin (saying so, and how long it has taken
## every 15 s while it compiles: a cold cache takes minutes)
build:
	@bash .ci/progress.sh "building bin/gateway, bin/worker, bin/reaper (the first run compiles for a few minutes)" \
	  $(GO) build -trimpath -ldflags="$(LDFLAGS)" -o $(BIN)/ ./cmd/gateway ./cmd/worker ./cmd/reaper

## static: the image's binaries (same flags as the Dockerfile), checked to be static
STATIC_FLAGS := CGO_ENABLED=0
static:
	$(STATIC_FLAGS) $(GO) build -trimpath -ldflags="-s -w $(LDFLAGS)" -o $(BIN)/static/ ./cmd/gateway ./cmd/worker ./cmd/reaper
	@for b in gateway worker reaper; do \
	  if grep -q 'ld-linux' $(BIN)/static/$$b; then echo "$$b is dynamically linked"; exit 1; fi; \
	done; echo "bin/static: gateway worker reaper, statically linked"

## servers: install redis-server and mariadb-server if missing (root), else say how
servers:
	@bash .ci/ensure-servers.sh

## lint: gofmt, go vet, go mod tidy (go.mod must already be tidy), and no
## tracked file over 1 MB but the assets listed in .ci/large-files
lint:
	@big=$$(git ls-files -z 2>/dev/null | xargs -0 -r du -b 2>/dev/null | awk '$$1 > 1048576 {print $$2}' | grep -vxF -f .ci/large-files || true); \
	  if [ -n "$$big" ]; then echo "tracked files over 1 MB (a build output? list a deliberate asset in .ci/large-files):"; echo "$$big"; exit 1; fi
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@$(GO) mod tidy -diff || { echo "go.mod is not tidy: run go mod tidy"; exit 1; }

## test: every test with the race detector (each starts its own servers),
## and beside them the lint and the second run on a Redis Cluster: make
## runs the three at once (-j3), each one's output printed whole when it
## ends, and fails if any fails; the lint is niced, so the test builds go
## first (a cold vet ahead of them held them back 156 s).
## The longest packages are named first: go test starts them first, so
## the end-to-end runs (pkg/internal/harness and its crowd package) go
## beside all the others instead of after them. One package more than
## there are cores runs at once (-p). The harness takes three to four
## minutes on an idle machine: its timeout is 30, so that a busy one (a
## second copy of the suite beside it) does not cut it off.
SLOW_PKGS := ./pkg/internal/harness ./pkg/internal/harness/crowd ./pkg/gateway ./pkg/reaper ./pkg/internal/cmd/demo ./pkg/worker ./pkg/rdb
TEST_P ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
test: servers
	@$(MAKE) --no-print-directory -j3 --output-sync=target test-race test-lint test-cluster

.PHONY: test-race test-lint test-cluster
test-race:
	$(GO) test -race -count=1 -p $(TEST_P) -timeout 30m $(SLOW_PKGS) $(PKGS)
test-lint:
	@nice -n 10 $(MAKE) --no-print-directory lint
test-cluster:
	$(GO) test -race -count=1 ./pkg/rdb ./pkg/rdb/admission ./pkg/rdb/split ./pkg/rdb/upkeep ./pkg/room -args -redis-cluster

## fuzz: every fuzz target for FUZZTIME each (CI: 5000 inputs); their
## seed corpora are the f.Add calls, and what a run finds stays in testdata/fuzz.
## A count, not a duration: go1.26's fuzz coordinator can fail a target with
## "context deadline exceeded" and no crasher at a -fuzztime deadline on a
## loaded machine (golang/go#75804, fixed in go1.27); a count has no deadline.
FUZZTIME ?= 50000x
FUZZ_TARGETS := ./pkg/order:FuzzOrderID ./pkg/order:FuzzItem ./pkg/rdb:FuzzStreamEntry \
	./pkg/gateway:FuzzClaimBody ./pkg/gateway/operator:FuzzCreateVoucher \
	./pkg/token:FuzzFastPathAgreesWithGolangJWT ./pkg/token:FuzzTokenVerifier ./pkg/token:FuzzNumericDate ./pkg/token:FuzzDecodeClaims \
	./pkg/db:FuzzSnapshots ./pkg/event:FuzzEventJSON ./pkg/jsonstr:FuzzAppend
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

## test-short: unit and integration tests, without the end-to-end runs
test-short: servers
	$(GO) test -short -count=1 $(PKGS)

## demo: a flash sale end to end on throwaway servers, with a report
## (the binaries built once, into ./bin, and run from there)
demo: servers build demo-bin
	$(BIN)/demo -bin $(BIN) $(DEMO_FLAGS)

.PHONY: demo-bin
demo-bin:
	@bash .ci/progress.sh "building bin/demo" $(GO) build -o $(BIN)/demo ./pkg/internal/cmd/demo

## dev: throwaway servers, the roles and the console kept running, with
## their addresses, tokens and a ready curl printed; Ctrl-C stops them
DEV_PORT ?= 8080
dev: servers build demo-bin
	@# Ctrl-C is the way out: the demo takes the terminal's foreground
	@# (-foreground), so Ctrl-C reaches it and not make; it stops
	@# everything, says "stopped" and exits 0, and make with it.
	$(BIN)/demo -bin $(BIN) -serve -foreground -port $(DEV_PORT) $(DEMO_FLAGS)

## helm-test: lint and render the chart, decode every document strictly into
## the Kubernetes API types and check its policies (no cluster needed)
HELM_VERSION := v3.16.4
HELM := $(BIN)/tools/helm
$(HELM):
	GOBIN=$(abspath $(BIN)/tools) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

helm-test: $(HELM)
	cd helm/flashsale/test && $(GO) vet ./... && HELM=$(abspath $(HELM)) $(GO) test -count=1 ./...

## bench-allocs: an admitted claim's heap allocations against their budget
## (pkg/gateway/alloc_bench_test.go); a count, not a time: CI runs it
bench-allocs: servers
	$(GO) test -run '^$$' -bench '^BenchmarkAdmittedClaim$$' -benchtime 3000x ./pkg/gateway

## bench: ceilings, gateway, worker drain, end to end, memory (BENCH_FLAGS to tune)
bench: servers bench-allocs
	$(GO) build -o $(BIN)/bench ./pkg/internal/cmd/bench
	$(BIN)/bench $(BENCH_FLAGS)

## chaos: a 60s sale under worker/reaper/mariadbd/redis-server kills, on one
## Redis and then on a Redis Cluster with replicas, a master killed (CHAOS_DURATION to change)
CHAOS_DURATION ?= 60s
chaos: servers
	CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -count=1 -timeout 30m -run 'TestChaos$$|TestChaosOnACluster$$' -v ./pkg/internal/harness/crowd

## dataloss: what appendfsync everysec risks, and what reconcile --repair restores
dataloss: servers
	$(GO) test -count=1 -timeout 10m -run 'TestRedisLosingItsLastWrites$$' -v ./pkg/internal/harness

clean:
	rm -rf $(BIN)
