#!/usr/bin/env bash
# Conformance run of the JavaScript client (see clients/conformance/run.sh):
# unit tests and the example, then the live scenarios against $LC_ADDR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if node --test test/ >&2 && node examples/example.mjs "$LC_ADDR" >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: unit tests or the example failed"
	exit 1
fi
node conformance.mjs
