# Locking-Center. `make run` starts lcd with defaults; `make test` runs the
# whole suite; `make bench` measures what docs/benchmarks.md records.
GO      ?= go
BIN     ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo none)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: all build run test test-go test-clients test-deploy bench bench-ha soak soak-cluster fuzz clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lcd ./cmd/lcd
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lc-cli ./cmd/lc-cli

# Starts lcd on :22119 (mutex), :22120 (management) and :22121 (metrics).
run: build
	./$(BIN)/lcd

# The whole suite: Go packages with the race detector, the nine clients
# against a live lcd, and the deployment files. Missing toolchains are
# installed on the way (apt-get, npm).
test: test-go test-clients test-deploy

test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	cd internal/bench/ha && $(GO) vet ./...

test-clients:
	bash clients/conformance/run.sh

test-deploy:
	sh deploy/test.sh

bench:
	$(GO) run ./internal/bench

# Three lcd nodes beside three etcd members (Debian's etcd-server, whose
# etcd must be on PATH: apt-get install etcd-server), and lcd's failover;
# its own module, so that the etcd client stays out of lcd's.
bench-ha:
	cd internal/bench/ha && $(GO) run . -root ../../..

# A long crash-and-restart soak of the write-ahead log.
soak:
	LC_SOAK_ROUNDS=$${LC_SOAK_ROUNDS:-200} $(GO) test -race -count=1 -timeout 2h -run TestCrashRecovery -v ./cmd/lcd

# A long soak of a three-node cluster: leader kills and partitions under
# load, each round checked for lost grants, overlaps and linearizability.
soak-cluster:
	LC_CLUSTER_ROUNDS=$${LC_CLUSTER_ROUNDS:-30} $(GO) test -race -count=1 -timeout 2h -run 'TestCluster(LeaderKilled|Partition)' -v ./cmd/lcd

# A short run of every fuzz target; new inputs land in the Go cache.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeRequest -fuzztime 30s ./oneshot
	$(GO) test -run '^$$' -fuzz FuzzDecodeHolders -fuzztime 30s ./manager
	$(GO) test -run '^$$' -fuzz FuzzLabelValue -fuzztime 30s ./metrics
	$(GO) test -run '^$$' -fuzz FuzzParseFrame -fuzztime 30s ./session

clean:
	rm -rf $(BIN) dist
