# Locking-Center. `make run` starts lcd with defaults; `make test` runs the
# whole suite; `make bench` measures what docs/benchmarks.md records.
GO      ?= go
BIN     ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo none)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: all build run test test-go bench fuzz clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/lcd ./cmd/lcd

run: build
	./$(BIN)/lcd

test: test-go

test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

bench:
	$(GO) run ./internal/bench

clean:
	rm -rf $(BIN)
