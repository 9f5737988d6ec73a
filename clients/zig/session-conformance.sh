#!/usr/bin/env bash
# Session conformance run of the Zig client (clients/conformance/SESSIONS.md):
# builds the client with `zig build`, runs the session client's unit tests
# (the session vectors byte for byte, the fuzzed decoder), builds and runs
# each example against $LC_ADDR, then the scenarios against the servers the
# harness started. Build and test output goes to stderr; stdout carries only
# the lines "ok <id>" / "FAIL <id>: <reason>". zig comes from PATH or
# $LC_TOOLS/bin (clients/conformance/setup.sh puts it there).
set -uo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/build-env.sh"
zig_install session-programs

unit() {
	zig_build session-test --summary all || return 1
	echo "example: the v1 example and the session example against $LC_ADDR"
	"$build/out/bin/example" "$LC_ADDR" || return 1
	"$build/out/bin/session-example" "$LC_ADDR" || return 1
}
if unit >"$build/unit.log" 2>&1; then echo "ok unit-tests"; else
	echo "FAIL unit-tests: $(grep -m1 'Build Summary' "$build/unit.log" || tail -n 1 "$build/unit.log")"
fi
cat "$build/unit.log" >&2
"$build/out/bin/session-scenario"
