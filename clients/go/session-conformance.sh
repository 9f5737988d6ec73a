#!/usr/bin/env bash
# Session conformance run of the Go client (see clients/conformance/SESSIONS.md
# and sessions.sh): the session client's unit tests, then the scenarios
# against the servers the harness started.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if go vet ./clients/go/... >&2 &&
	go test -count=1 -run 'Session|Describe|Watch|Election|Semaphore|Answer|ParseFrame|TLS|Note' ./clients/go >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: go test ./clients/go (the session client's tests) failed"
	exit 1
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/sessionconformance" ./clients/go/internal/sessionconformance
"$bin/sessionconformance"
