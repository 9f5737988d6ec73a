#!/usr/bin/env bash
# Session conformance run of the C++ client (clients/conformance/SESSIONS.md),
# lockingcenter/session.hpp on the C library. Builds the C library
# (clients/c/build.sh) and the C++ programs with g++ (C++20, for
# std::stop_token), with AddressSanitizer and UndefinedBehaviorSanitizer,
# and with ThreadSanitizer, and runs:
#   - unit-tests: the C codec's unit tests and tests/test_session.cpp (the
#     handles' types, the error family, a silent server, the standard lock
#     types and the loss against the lcd at LC_ADDR) in both sanitizer
#     builds, the README's example and the v1 example against LC_ADDR, and
#     every scenario but s-leader-kill under ThreadSanitizer;
#   - the 16 scenarios, in order, in the AddressSanitizer build.
# Build and test output goes to stderr; stdout carries only the lines
# "ok <id>" / "FAIL <id>: <reason>".
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../c/build.sh"
cxx=${CXX:-g++}
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

asan="-fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
tsan="-fsanitize=thread"

# build_cpp DIR FLAGS...: the C library in DIR, then the C++ programs.
build_cpp() {
	local dir=$1 flags=(-std=c++20 -Wall -Wextra -Wpedantic -Werror -g -O0 -I"$here/include" -I"$lc_c_dir/include")
	shift
	# shellcheck disable=SC2068
	lc_c_build "$dir" -O1 $@ || return 1
	"$lc_cc" -std=c11 -g $@ -c "$lc_c_dir/scenario/proc.c" -o "$dir/proc.o" || return 1
	local link
	link=$(cat "$dir/link.flags")
	# shellcheck disable=SC2068,SC2086
	"$cxx" "${flags[@]}" $@ "$here/tests/test_session.cpp" "$dir/liblockingcenter.a" $link -o "$dir/test_session_cpp" &&
		"$cxx" "${flags[@]}" $@ -I"$lc_c_dir/scenario" "$here/scenario/session_scenario.cpp" "$dir/proc.o" \
			"$dir/liblockingcenter.a" $link -o "$dir/session_scenario" &&
		lc_c_test_session "$dir" $@
}

build_all() {
	# shellcheck disable=SC2086
	build_cpp "$build/asan" $asan &
	local a=$!
	# shellcheck disable=SC2086
	build_cpp "$build/tsan" $tsan &
	local t=$!
	mkdir -p "$build/plain"
	lc_c_build "$build/plain" -O2 &&
		"$cxx" -std=c++20 -Wall -Wextra -Wpedantic -Werror -O1 -I"$here/include" -I"$lc_c_dir/include" \
			"$here/examples/session_example.cpp" "$build/plain/liblockingcenter.a" $(cat "$build/plain/link.flags") \
			-o "$build/plain/session_example" &&
		"$cxx" -std=c++17 -Wall -Wextra -Wpedantic -Werror -O1 -I"$here/include" "$here/examples/example.cpp" \
			-o "$build/plain/example" &&
		"$cxx" -std=c++17 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$here/include" -I"$lc_c_dir/include" \
			"$here/examples/session_example.cpp"
	local p=$?
	wait $a && wait $t && [ $p -eq 0 ]
}

if ! build_all >&2; then
	lc_no_build C++
	exit 1
fi

unit=ok why=
note() { unit=fail why=${why:-$1}; }
for v in asan tsan; do
	"$build/$v/test_session" "$here/../testdata/session-vectors.json" >"$build/codec-$v.log" 2>&1 ||
		note "the codec's unit tests ($v): $(grep -m1 FAIL "$build/codec-$v.log")"
	TSAN_OPTIONS="exitcode=66" "$build/$v/test_session_cpp" >"$build/unit-$v.log" 2>&1 ||
		note "the C++ unit tests ($v): $(grep -m1 -E 'FAIL|WARNING' "$build/unit-$v.log")"
	cat "$build/codec-$v.log" "$build/unit-$v.log" >&2
done
bash "$lc_c_dir/tests/readme-example.sh" "$here/README.md" cpp "$here/examples/session_example.cpp" \
	"$build/plain/session_example" >&2 || note "the README's example"
"$build/plain/example" "$LC_ADDR" >"$build/example.log" 2>&1 || note "the v1 example: $(tail -n 1 "$build/example.log")"
tsan=$(lc_tsan_scenarios "$build/tsan/session_scenario" "$build") || note "$tsan"
if [ $unit = ok ]; then echo "ok unit-tests"; else echo "FAIL unit-tests: $why"; fi

ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" "$build/asan/session_scenario"
