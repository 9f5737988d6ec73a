#!/usr/bin/env bash
# Acquire+release cycles per second of the Zig session client: WORKERS
# threads sharing one Session, each on its own key, against an lcd of its
# own on 127.0.0.1, and in the same rounds the Go client's (WORKERS
# goroutines sharing one session: the program of
# clients/python/bench/session_bench.py --go). Prints each round (for Zig
# also the process's CPU time per cycle), then the medians.
#
#     bash clients/zig/bench/session-bench.sh [WORKERS [SECONDS [ROUNDS]]]   # 16 5 3
set -euo pipefail
workers=${1:-16} seconds=${2:-5} rounds=${3:-3}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
work=$(mktemp -d)
lcd_pid=
gobin=
cleanup() {
	[ -z "$lcd_pid" ] || kill "$lcd_pid" 2>/dev/null || true
	[ -z "$lcd_pid" ] || wait "$lcd_pid" 2>/dev/null || true
	[ -z "$gobin" ] || rm -rf "$(dirname "$gobin")"
	rm -rf "$work"
}
trap cleanup EXIT

zig=$(command -v zig || echo "${LC_TOOLS:-$HOME/.cache/locking-center/tools}/bin/zig")
echo "building lcd, the Go program and the Zig program (ReleaseFast)" >&2
(cd "$root" && go build -o "$work/lcd" ./cmd/lcd)
gobin=$(cd "$root/clients/python/bench" && python3 -c 'import session_bench; print(session_bench.go_binary())')
(cd "$root/clients/zig" && "$zig" build session-bench-install -Doptimize=ReleaseFast --cache-dir "$work/cache" --prefix "$work/out")

env BIND_ADDRESS=127.0.0.1:0 LOG_FORMAT=text "$work/lcd" 2>"$work/lcd.log" &
lcd_pid=$!
addr=
for _ in $(seq 100); do
	addr=$(grep -m1 -o 'mutex=[^ ]*' "$work/lcd.log" 2>/dev/null | cut -d= -f2) && [ -n "$addr" ] && break
	sleep 0.1
done
[ -n "$addr" ] || { echo "lcd did not start: $(cat "$work/lcd.log")" >&2; exit 1; }

zs=() gs=()
for r in $(seq "$rounds"); do
	read -r z cpu < <("$work/out/bin/session-bench" "$addr" "$workers" "$seconds")
	g=$("$gobin" "$addr" "$workers" "$seconds")
	zs+=("$z") gs+=("$g")
	echo "round $r: $workers threads, one Zig session: $z cycles/s, $cpu µs CPU/cycle; $workers goroutines, one Go session: $g cycles/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "median zig: $(median "${zs[@]}") cycles/s"
echo "median go: $(median "${gs[@]}") cycles/s"
