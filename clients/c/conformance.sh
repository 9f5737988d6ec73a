#!/usr/bin/env bash
# Builds the C client with gcc, runs its unit tests (the protocol vectors
# included), then runs the live scenario against the server at $LC_ADDR.
# Build and test output goes to stderr; stdout carries only the lines
# "ok <id>" / "FAIL <id>: <reason>": unit-tests first, then the scenarios.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vectors="$here/../testdata/vectors.json"
cc=${CC:-gcc}
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

flags=(-std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -I"$here/include")

build_all() {
	"$cc" "${flags[@]}" -c "$here/src/lockingcenter.c" -o "$build/lockingcenter.o" &&
		ar rcs "$build/liblockingcenter.a" "$build/lockingcenter.o" &&
		"$cc" "${flags[@]}" -I"$here/tests" "$here/tests/test_lockingcenter.c" "$here/tests/json.c" \
			"$build/liblockingcenter.a" -lpthread -o "$build/test_lockingcenter" &&
		"$cc" "${flags[@]}" "$here/examples/example.c" "$build/liblockingcenter.a" -o "$build/example" &&
		"$cc" "${flags[@]}" "$here/scenario/scenario.c" "$build/liblockingcenter.a" -lpthread -o "$build/scenario"
}

if ! build_all >&2; then
	echo "FAIL unit-tests: the C client does not build (see stderr)"
	exit 1
fi

status=0
if "$build/test_lockingcenter" "$vectors" >"$build/unit.log" 2>&1; then echo "ok unit-tests"; else
	echo "FAIL unit-tests: $(tail -n 1 "$build/unit.log")" && status=1
fi
cat "$build/unit.log" >&2
"$build/scenario" || status=1
exit "$status"
