#!/usr/bin/env bash
# Builds the C++ client's tests with g++, runs them (the protocol vectors
# included), then runs the live scenario against the server at $LC_ADDR.
# Build and test output goes to stderr; stdout carries only the lines
# "ok <id>" / "FAIL <id>: <reason>": unit-tests first, then the scenarios.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vectors="$here/../testdata/vectors.json"
cxx=${CXX:-g++}
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

flags=(-std=c++17 -Wall -Wextra -Wpedantic -Werror -O1 -I"$here/include")

build_all() {
	"$cxx" "${flags[@]}" -I"$here/tests" "$here/tests/test_client.cpp" -lpthread -o "$build/test_client" &
	local tests=$!
	"$cxx" "${flags[@]}" "$here/scenario/scenario.cpp" -lpthread -o "$build/scenario" &
	local scenario=$!
	"$cxx" "${flags[@]}" -fsyntax-only "$here/examples/example.cpp" || return 1
	wait "$tests" && wait "$scenario"
}

if ! build_all >&2; then
	echo "FAIL unit-tests: the C++ client does not build (see stderr)"
	exit 1
fi

status=0
if "$build/test_client" "$vectors" >"$build/unit.log" 2>&1; then echo "ok unit-tests"; else
	echo "FAIL unit-tests: $(tail -n 1 "$build/unit.log")" && status=1
fi
cat "$build/unit.log" >&2
"$build/scenario" || status=1
exit "$status"
