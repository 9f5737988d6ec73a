#!/usr/bin/env bash
# Session conformance run of the Rust client (clients/conformance/SESSIONS.md):
# the unit tests (the session codec against the shared vectors, mutated and
# random frames, the session against a scripted server), the session
# examples against $LC_ADDR (the README's, and one short round of the
# benchmark), then the scenario program against the servers the harness
# started. Standard library only: cargo builds offline.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if cargo test --offline --quiet >&2 &&
	cargo run --offline --quiet --example session -- "$LC_ADDR" >&2 &&
	cargo run --offline --quiet --example session_bench -- "$LC_ADDR" --seconds 0.2 --rounds 1 >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: cargo test or a session example failed (see standard error)"
fi
if ! cargo build --offline --quiet --example session-conformance >&2; then
	echo "session-conformance.sh: the scenario program did not build" >&2
	exit 1
fi
exec cargo run --offline --quiet --example session-conformance
