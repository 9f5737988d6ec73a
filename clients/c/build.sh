# build.sh - sourced by the C and C++ clients' scripts: builds the C client
# with gcc, without CMake (which a fresh machine may not have).
#
#   lc_c_build DIR [FLAGS...]   the library, DIR/liblockingcenter.a, and
#                               DIR/link.flags (what a program links besides)
#   lc_c_build_all DIR          DIR/plain, DIR/asan (AddressSanitizer and
#                               UndefinedBehaviorSanitizer), DIR/tsan
#                               (ThreadSanitizer): the library, the unit tests,
#                               the example and the scenario program in each
#
# OpenSSL is used when its headers and libraries are found (LC_OPENSSL=0
# turns it off): TLS sessions then work, and LC_HAVE_OPENSSL is defined.

lc_c_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The scenarios of clients/conformance/SESSIONS.md, in order
# (scenario/scenarios.h), and those a ThreadSanitizer build runs before the
# scripts' own run: all but s-leader-kill, which kills a node of the one
# cluster for good (s-leader-stop only stops the leader for 6 s).
lc_scenarios=(s-acquire-release s-try-busy s-wait-bound s-cancel s-stale-release s-lease-expiry s-kill-client
	s-resume s-leader-stop s-leader-kill s-tls-token s-modes s-note s-big-token s-silent-server s-fifo-mixed)
lc_tsan_set=("${lc_scenarios[@]:0:9}" "${lc_scenarios[@]:10}")
lc_cc=${CC:-gcc}

# lc_openssl_flags prints the flags that enable OpenSSL, nothing without it.
lc_openssl_flags() {
	[ "${LC_OPENSSL:-1}" = 0 ] && return 0
	local probe
	probe=$(mktemp -d)
	printf '#include <openssl/ssl.h>\nint main(void) { return SSL_CTX_new(TLS_client_method()) == 0; }\n' >"$probe/t.c"
	if "$lc_cc" "$probe/t.c" -o "$probe/t" -lssl -lcrypto >/dev/null 2>&1; then
		echo "-DLC_HAVE_OPENSSL"
	fi
	rm -rf "$probe"
}

lc_c_build() {
	local dir=$1 f o
	shift
	mkdir -p "$dir"
	local tls
	tls=$(lc_openssl_flags)
	local flags=(-std=c11 -Wall -Wextra -Wpedantic -Werror -g -I"$lc_c_dir/include" -I"$lc_c_dir/src" $tls "$@")
	local objs=()
	for f in lockingcenter frame conn session; do
		o="$dir/$f.o"
		"$lc_cc" "${flags[@]}" -c "$lc_c_dir/src/$f.c" -o "$o" || return 1
		objs+=("$o")
	done
	rm -f "$dir/liblockingcenter.a"
	ar rcs "$dir/liblockingcenter.a" "${objs[@]}" || return 1
	local link="-lpthread"
	[ -n "$tls" ] && link="-lssl -lcrypto -lpthread"
	echo "$link" >"$dir/link.flags"
}

# lc_c_test_session DIR FLAGS...: the session unit tests, DIR/test_session,
# on the library in DIR.
lc_c_test_session() {
	local dir=$1
	shift
	"$lc_cc" -std=c11 -Wall -Wextra -Wpedantic -Werror -g -I"$lc_c_dir/include" -I"$lc_c_dir/src" "$@" \
		-I"$lc_c_dir/tests" "$lc_c_dir/tests/test_session.c" "$lc_c_dir/tests/json.c" \
		"$dir/liblockingcenter.a" $(cat "$dir/link.flags") -o "$dir/test_session"
}

# lc_c_programs DIR FLAGS...: the unit tests, the examples, the scenario
# programs and the benchmark, on the library in DIR.
lc_c_programs() {
	local dir=$1
	shift
	local flags=(-std=c11 -Wall -Wextra -Wpedantic -Werror -g -I"$lc_c_dir/include" -I"$lc_c_dir/src" "$@")
	local link
	link=$(cat "$dir/link.flags")
	lc_c_test_session "$dir" "$@" &&
		"$lc_cc" "${flags[@]}" -I"$lc_c_dir/tests" "$lc_c_dir/tests/test_lockingcenter.c" "$lc_c_dir/tests/json.c" \
			"$dir/liblockingcenter.a" $link -o "$dir/test_lockingcenter" &&
		"$lc_cc" "${flags[@]}" "$lc_c_dir/examples/example.c" "$dir/liblockingcenter.a" $link -o "$dir/example" &&
		"$lc_cc" "${flags[@]}" "$lc_c_dir/examples/session_example.c" "$dir/liblockingcenter.a" $link \
			-o "$dir/session_example" &&
		"$lc_cc" "${flags[@]}" -I"$lc_c_dir/scenario" "$lc_c_dir/scenario/session_scenario.c" \
			"$lc_c_dir/scenario/proc.c" "$dir/liblockingcenter.a" $link -o "$dir/session_scenario" &&
		"$lc_cc" "${flags[@]}" -O2 "$lc_c_dir/bench/session_bench.c" "$dir/liblockingcenter.a" $link \
			-o "$dir/session_bench"
}

lc_c_build_all() {
	local dir=$1 pids=() rc=0 v
	local -A variant=(
		[plain]="-O2"
		[asan]="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
		[tsan]="-O1 -fsanitize=thread"
	)
	for v in plain asan tsan; do
		# shellcheck disable=SC2086
		(lc_c_build "$dir/$v" ${variant[$v]} && lc_c_programs "$dir/$v" ${variant[$v]}) &
		pids+=($!)
	done
	for v in "${pids[@]}"; do wait "$v" || rc=1; done
	return $rc
}

# lc_no_build LANGUAGE: the lines of a script whose client did not build.
lc_no_build() {
	echo "FAIL unit-tests: the $1 client does not build (see stderr)"
	local id
	for id in "${lc_scenarios[@]}"; do echo "FAIL $id: the $1 client does not build"; done
}

# lc_tsan_scenarios BINARY DIR: runs lc_tsan_set with BINARY, a
# ThreadSanitizer build, its output on stderr (files in DIR). On a report
# or a failure it prints why and returns 1.
lc_tsan_scenarios() {
	local bin=$1 dir=$2 rc
	TSAN_OPTIONS="exitcode=66 halt_on_error=1" "$bin" "${lc_tsan_set[@]}" >"$dir/tsan.out" 2>"$dir/tsan.err"
	rc=$?
	sed 's/^/tsan: /' "$dir/tsan.out" >&2
	tail -n 40 "$dir/tsan.err" >&2
	[ $rc -eq 0 ] && return 0
	echo "the scenarios under ThreadSanitizer (exit $rc): $(grep -h -m1 -E 'WARNING: ThreadSanitizer|^FAIL' "$dir/tsan.out" "$dir/tsan.err" | head -n 1)"
	return 1
}
