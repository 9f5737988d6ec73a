#!/usr/bin/env bash
# Session conformance run of the Python client (clients/conformance/SESSIONS.md):
# the session unit tests that need no server (the frames against the shared
# vectors, the fuzzed decoder, both session classes against a scripted
# server), then the scenarios against the servers the harness started. There
# is nothing to build: standard library only.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if PYTHONPATH=src:tests python3 -m unittest test_session_frames test_session_fake >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: the session unit tests failed (see standard error)"
fi
python3 session_conformance.py
