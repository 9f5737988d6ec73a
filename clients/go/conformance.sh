#!/usr/bin/env bash
# Conformance run of the Go client (see clients/conformance/run.sh): unit
# tests, then the live scenarios against the lcd at $LC_ADDR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if go vet ./clients/go/... >&2 && go test -count=1 ./clients/go/... >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: go test ./clients/go/... failed"
	exit 1
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/conformance" ./clients/go/internal/conformance
"$bin/conformance"
