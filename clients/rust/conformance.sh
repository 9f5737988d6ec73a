#!/usr/bin/env bash
# Conformance run of the Rust client (see clients/conformance/run.sh): unit
# tests and the example, then the live scenarios against $LC_ADDR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
if cargo test --offline --quiet >&2 &&
	cargo run --offline --quiet --example example -- "$LC_ADDR" >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: cargo test or the example failed"
	exit 1
fi
cargo build --offline --quiet --example conformance >&2
target/debug/examples/conformance
