#!/usr/bin/env bash
# Conformance run of the Python client (see clients/conformance/run.sh): unit
# tests of v1 and the example, then the live scenarios against the lcd at
# $LC_ADDR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if PYTHONPATH=src:tests python3 -m unittest test_client test_vectors >&2 &&
	(cd ../.. && python3 clients/python/examples/example.py "$LC_ADDR") >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: unit tests or the example failed"
	exit 1
fi
python3 conformance.py
