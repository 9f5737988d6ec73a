#!/usr/bin/env bash
# Session conformance run of the JavaScript client (clients/conformance/SESSIONS.md):
# the session unit tests, then the scenarios against the harness's servers.
# Nothing to build: the client is JavaScript run by node as it is.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if node --test test/session-*.test.js >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: node --test test/session-*.test.js failed (see standard error)"
fi
exec node session-conformance.mjs
