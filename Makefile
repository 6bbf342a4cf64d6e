GO ?= go
FUZZTIME ?= 1m
FUZZMINIMIZE ?= 5s

.PHONY: all build test ts slow race fuzz bench fault-long partition-kills cluster-long cluster-race cluster-bench node-long node-bench serve lint ci

all: lint test

# The version and commit ctxd version and $$SRV.INFO report: the tag of
# the commit, or the tag before it, the commits since and the commit
# (v0.9.0-3-g0123abc), -dirty for a modified tree. Go stamps the same from
# a clone, but not in a linked git worktree nor with -buildvcs=false.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o bin/ctxd ./cmd/ctxd

## test: the fast tier, the README's test command: every package, and the service end to end on an embedded server
test:
	$(GO) test ./...

## ts: the TypeScript client (clients/typescript), built and tested against bin/ctxd (Node.js 20 and npm)
ts: build
	cd clients/typescript && npm ci --no-audit --no-fund && npm run build && CTXD_BIN=$(CURDIR)/bin/ctxd npm test

## slow: the process, cluster and fault tier (integration files built with the tag slow); CI runs it as its own step
slow:
	$(GO) test -tags slow -count 1 -timeout 30m ./integration

## race: the concurrent packages under the race detector
race:
	$(GO) test -race -short ./pkg/store/... ./pkg/server/... ./pkg/bus/... ./pkg/rebuild/... ./pkg/app/... ./integration/...

## fuzz: each fuzz target (go test -list finds them) for FUZZTIME; a new
## input that widens coverage is minimized for FUZZMINIMIZE at most (Go's
## default, 60s, leaves the counts standing still while it works)
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  targets=$$($(GO) test $$pkg -list '^Fuzz') || exit 1; \
	  for f in $$(echo "$$targets" | awk '/^Fuzz/'); do \
	    echo "--- $$pkg $$f"; \
	    $(GO) test $$pkg -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE); \
	  done; \
	done

## bench: the benchmarks of the core and of the service
bench:
	$(GO) test ./pkg/record ./pkg/projection ./integration -run '^$$' -bench . -benchmem

## fault-long: the SIGKILL fault test with 25 kills and more writers
fault-long:
	$(GO) test -tags slow ./integration -run '^TestFault_KillUnderLoad$$' -count 1 -v -timeout 30m -fault.kills 25 -fault.writers 8 -fault.sessions 64

## partition-kills: ctxd partition SIGKILLed at 100 random moments, on the embedded server's store and on a running server with publishers
partition-kills:
	$(GO) test -tags slow ./integration -run '^TestPartition_KilledAtRandom' -count 1 -v -timeout 30m -partition.kills 100

## cluster-long: the cluster faults with 10 s of load before and after each, and more writers
cluster-long:
	$(GO) test -tags slow ./integration -run '^TestCluster_' -count 1 -v -timeout 30m -cluster.load 10s -cluster.writers 8

## cluster-race: the cluster tests with ctxd built with the race detector (a race makes it exit 66)
cluster-race:
	$(GO) test -tags slow ./integration -run '^TestCluster_' -count 1 -v -timeout 30m -ctxd.race

## cluster-bench: the cluster figures (docs/PERFORMANCE.md): each fault once, and fetch latency with 1 and 3 instances, unpartitioned and routed to partition owners
cluster-bench:
	$(GO) test -tags slow ./integration -run '^$$' -bench '^BenchmarkCluster_Faults$$' -benchtime 1x -timeout 30m -cluster.load 10s
	$(GO) test -tags slow ./integration -run '^$$' -bench '^BenchmarkCluster_Fetch$$' -benchtime 2000x -timeout 30m
	$(GO) test -tags slow ./integration -run '^$$' -bench '^BenchmarkCluster_FetchRouted$$' -benchtime 2000x -timeout 30m

## node-long: the SIGKILL and SIGSTOP of a nats-server node with the node down 20 s, 10 s of load around, more writers
node-long:
	$(GO) test -tags slow ./integration -run '^TestCluster_NodeFaults$$' -count 1 -v -timeout 30m -cluster.load 10s -node.down 20s -cluster.writers 8

## node-bench: the node fault figures (docs/PERFORMANCE.md), with the servers' default route ping and with a 1 s one
node-bench:
	$(GO) test -tags slow ./integration -run '^$$' -bench '^BenchmarkCluster_NodeFaults$$' -benchtime 1x -timeout 30m -cluster.load 10s -node.down 20s
	$(GO) test -tags slow ./integration -run '^$$' -bench '^BenchmarkCluster_NodeFaults$$' -benchtime 1x -timeout 30m -cluster.load 10s -node.down 20s -node.route-ping 1s

serve:
	$(GO) run ./cmd/ctxd serve

lint:
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(GO) vet ./...

ci:
	CI=true bash .ci/run
