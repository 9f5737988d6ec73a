# Locking-Center. `make run` starts lcd with defaults; `make test` runs the
# whole suite; `make bench` measures what docs/benchmarks.md records.
GO      ?= go
BIN     ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo none)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: all build run test test-go test-clients test-sessions test-deploy bench bench-v1 bench-session bench-http bench-modes bench-tls bench-ha soak soak-crash soak-powerloss soak-model soak-cluster soak-cluster-pause test-upgrade fuzz clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lcd ./cmd/lcd
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lc-cli ./cmd/lc-cli

# Starts lcd on :22119 (mutex), :22120 (management), :22121 (metrics) and
# :22122 (HTTP API).
run: build
	./$(BIN)/lcd

# The whole suite: Go packages with the race detector, the nine clients
# against a live lcd, the session clients against single and clustered
# lcds (every language with a clients/<lang>/session-conformance.sh), and
# the deployment files. Missing toolchains are installed on the way
# (apt-get, npm).
test: test-go test-clients test-sessions test-deploy

test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	cd internal/bench/ha && $(GO) vet ./...

test-clients:
	bash clients/conformance/run.sh

test-sessions:
	bash clients/conformance/sessions.sh

test-deploy:
	sh deploy/test.sh

# Every part of docs/benchmarks.md; bench-v1 and bench-session run the
# parts of one protocol. The Redis columns need redis-server on PATH
# (Debian: apt-get install redis-server); without it they stay empty.
bench:
	$(GO) run ./internal/bench

bench-v1:
	$(GO) run ./internal/bench -only throughput,hotkey,memory,timewait

bench-session:
	$(GO) run ./internal/bench -only session-throughput,session-hotkey,session-memory

bench-http:
	$(GO) run ./internal/bench -only http-throughput,sse-fanout,sse-unread

# The lock modes of the session protocol: readers and a writer, a
# semaphore, priority aging, acquires beside 10,000 waiting sessions.
bench-modes:
	$(GO) run ./internal/bench/modes

# What TLS costs the session protocol: lcd in plain TCP and under mutual
# TLS, side by side in the same rounds.
bench-tls:
	$(GO) run ./internal/bench/tlscost

# Three lcd nodes beside three etcd members (Debian's etcd-server, whose
# etcd must be on PATH: apt-get install etcd-server), and lcd's failover;
# its own module, so that the etcd client stays out of lcd's.
bench-ha:
	cd internal/bench/ha && $(GO) run . -root ../../..

# Long soaks of the write-ahead log: lcd killed with SIGKILL and restarted,
# round after round; then power losses simulated under the log, which drop
# every byte that was not synced.
soak: soak-crash soak-powerloss soak-model

soak-crash:
	LC_SOAK_ROUNDS=$${LC_SOAK_ROUNDS:-200} $(GO) test -race -count=1 -timeout 2h -run TestCrashRecovery -v ./cmd/lcd

soak-powerloss:
	LC_POWERLOSS_ROUNDS=$${LC_POWERLOSS_ROUNDS:-1000} $(GO) test -race -count=1 -timeout 2h -run 'TestPowerLoss$$' -v ./store

# The lock table's randomized model test, many more histories than make
# test runs (LC_MODEL_CHECKS, default 100,000).
soak-model:
	$(GO) test -count=1 -timeout 2h -run 'TestModel$$' -v ./mutex -rapid.checks=$${LC_MODEL_CHECKS:-100000}

# A long soak of a three-node cluster: leader kills, partitions and
# pauses under load, each round checked for lost grants, overlaps and
# linearizability, each run for replicas that differ (tables, raft logs).
soak-cluster:
	LC_CLUSTER_ROUNDS=$${LC_CLUSTER_ROUNDS:-30} $(GO) test -race -count=1 -timeout 2h -run 'TestCluster(LeaderKilled|Partition|LeaderPaused)' -v ./cmd/lcd

# The leader frozen with SIGSTOP for 1.5 to 6 s, then let go on, 40 times.
soak-cluster-pause:
	LC_CLUSTER_ROUNDS=$${LC_CLUSTER_ROUNDS:-40} $(GO) test -race -count=1 -timeout 2h -run 'TestClusterLeaderPaused' -v ./cmd/lcd

# A rolling upgrade of a three-node cluster under load, from the lcd of
# LC_UPGRADE_FROM (a git revision; default 57b4749, before batch entries)
# to this tree's (about a minute; needs the git history).
test-upgrade:
	bash internal/upgradetest/run.sh $${LC_UPGRADE_FROM:-57b4749}

# A short run of every fuzz target; new inputs land in the Go cache.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeRequest -fuzztime 30s ./oneshot
	$(GO) test -run '^$$' -fuzz FuzzDecodeHolders -fuzztime 30s ./manager
	$(GO) test -run '^$$' -fuzz FuzzDecodeRequest -fuzztime 30s ./manager
	$(GO) test -run '^$$' -fuzz FuzzLabelValue -fuzztime 30s ./metrics
	$(GO) test -run '^$$' -fuzz FuzzParseFrame -fuzztime 30s ./session
	$(GO) test -run '^$$' -fuzz FuzzDecodeRecord -fuzztime 30s ./store
	$(GO) test -run '^$$' -fuzz FuzzPayload -fuzztime 30s ./store
	$(GO) test -run '^$$' -fuzz FuzzDecodeEntry -fuzztime 30s ./cluster
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./auth
	$(GO) test -run '^$$' -fuzz FuzzEventJSON -fuzztime 30s ./httpapi
	$(GO) test -run '^$$' -fuzz FuzzParseFrame -fuzztime 30s ./clients/go
	$(GO) test -run '^$$' -fuzz FuzzDisplayKeyParsesBack -fuzztime 30s ./cmd/lc-cli

clean:
	rm -rf $(BIN) dist
