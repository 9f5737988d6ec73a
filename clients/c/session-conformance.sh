#!/usr/bin/env bash
# Session conformance run of the C client (clients/conformance/SESSIONS.md).
# Builds the library three times with gcc (plain; AddressSanitizer with
# UndefinedBehaviorSanitizer; ThreadSanitizer), with OpenSSL when its headers
# are found (TLS), and runs:
#   - unit-tests: the session unit tests (the codec against
#     clients/testdata/session-vectors.json, random and mutated frames, the
#     handshake against scripted servers) in all three builds, the v1 unit
#     tests, the README's example, and every scenario but s-leader-kill
#     under ThreadSanitizer against the harness's servers;
#   - the 16 scenarios, in order, in the AddressSanitizer build.
# Build and test output goes to stderr; stdout carries only the lines
# "ok <id>" / "FAIL <id>: <reason>".
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/build.sh"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

if ! lc_c_build_all "$build" >&2; then
	lc_no_build C
	exit 1
fi

vectors="$here/../testdata/session-vectors.json"
unit=ok why=
for variant in plain asan tsan; do
	if ! "$build/$variant/test_session" "$vectors" >"$build/unit-$variant.log" 2>&1; then
		unit=fail why="session unit tests ($variant): $(grep -m1 FAIL "$build/unit-$variant.log" || tail -n 1 "$build/unit-$variant.log")"
	fi
	cat "$build/unit-$variant.log" >&2
done
if ! "$build/plain/test_lockingcenter" "$here/../testdata/vectors.json" >"$build/v1.log" 2>&1; then
	unit=fail why="v1 unit tests: $(tail -n 1 "$build/v1.log")"
fi
if ! bash "$here/tests/readme-example.sh" "$here/README.md" c "$here/examples/session_example.c" \
	"$build/plain/session_example" >&2; then
	unit=fail why="the README's example"
fi
if ! "$build/plain/example" "$LC_ADDR" >"$build/example.log" 2>&1; then
	unit=fail why="the v1 example: $(tail -n 1 "$build/example.log")"
fi
# Every scenario but s-leader-kill under ThreadSanitizer: any report fails
# the cell.
if ! tsan=$(lc_tsan_scenarios "$build/tsan/session_scenario" "$build"); then
	unit=fail why=$tsan
fi
if [ $unit = ok ]; then echo "ok unit-tests"; else echo "FAIL unit-tests: $why"; fi

ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
	"$build/asan/session_scenario"
