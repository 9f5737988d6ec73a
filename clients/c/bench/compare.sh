#!/usr/bin/env bash
# Acquire+release cycles per second through one shared session, 16 threads
# each on its own key, for the C client (bench/session_bench.c), the C++
# client (clients/cpp/bench/session_bench.cpp) and the Go client (the
# program of clients/python/bench/session_bench.py --go), in the same
# rounds, against one lcd this script starts on 127.0.0.1 (port 0) and
# stops. docs/benchmarks.md records its output.
#
#   clients/c/bench/compare.sh [ROUNDS=3] [SECONDS=5] [THREADS=16]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=$(cd "$here/../.." && pwd)
rounds=${1:-3} seconds=${2:-5} threads=${3:-16}
source "$here/build.sh"
work=$(mktemp -d)
lcd_pid=
cleanup() {
	[ -n "$lcd_pid" ] && kill "$lcd_pid" 2>/dev/null && wait "$lcd_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

lc_c_build "$work" -O2 >&2
link=$(cat "$work/link.flags")
# shellcheck disable=SC2086
"$lc_cc" -std=c11 -O2 -I"$here/include" "$here/bench/session_bench.c" "$work/liblockingcenter.a" $link -o "$work/c"
# shellcheck disable=SC2086
"${CXX:-g++}" -std=c++20 -O2 -I"$root/clients/cpp/include" -I"$here/include" "$root/clients/cpp/bench/session_bench.cpp" \
	"$work/liblockingcenter.a" $link -o "$work/cpp"
go=$(cd "$root/clients/python/bench" && python3 -c 'import session_bench; print(session_bench.go_binary())')
(cd "$root" && go build -o "$work/lcd" ./cmd/lcd)

env BIND_ADDRESS=127.0.0.1:0 HTTP_ADDRESS= LOG_FORMAT=text "$work/lcd" 2>"$work/lcd.log" &
lcd_pid=$!
for _ in $(seq 200); do grep -q 'msg="lcd started"' "$work/lcd.log" && break; sleep 0.05; done
addr=$(grep -m1 'msg="lcd started"' "$work/lcd.log" | sed -E 's/.* mutex=([^ ]+).*/\1/')

declare -A got
for r in $(seq "$rounds"); do
	for client in c cpp go; do
		bin="$work/$client"
		[ $client = go ] && bin=$go
		n=$("$bin" "$addr" "$threads" "$seconds")
		got[$client]+="$n "
		echo "round $r: $client, $threads threads, one session: $n cycles/s"
	done
done
for client in c cpp go; do
	# shellcheck disable=SC2086
	echo "median $client: $(printf '%s\n' ${got[$client]} | sort -n | sed -n "$(((rounds + 1) / 2))p") cycles/s"
done
rm -rf "$(dirname "$go")"
