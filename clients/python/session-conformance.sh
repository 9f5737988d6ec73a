#!/usr/bin/env bash
# Session conformance run of the Python client (clients/conformance/SESSIONS.md):
# the session unit tests (the frames against the shared vectors, the fuzzed
# decoder, both session classes against a scripted server, then against lcds
# of their own: the README's example, SIGKILL of a process holding three keys,
# big tokens, 1,000 asyncio tasks, TLS and the refusals, and an offline install
# into a fresh venv), then the scenarios against the servers the harness
# started. There is nothing to build: standard library only.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if PYTHONPATH=src:tests python3 -m unittest test_session_frames test_session_fake test_session_live test_install >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: the session unit tests failed (see standard error)"
fi
python3 session_conformance.py
