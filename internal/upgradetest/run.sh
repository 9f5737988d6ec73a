#!/bin/bash
# A rolling upgrade of a three-node cluster (RAFT_LOG_STORE of
# LC_UPGRADE_STORE, wal by default), under
# the load of this directory's program, from the lcd of a git revision
# (before batch entries: 57b4749 by default) to the working tree's: the
# nodes are stopped and started on the new lcd one at a time. It checks
# that while any node runs the old lcd the new leader writes one raft
# entry per command (its proposal counters), that once all run the new
# one the leader batches, that no node stops on an entry it cannot read,
# that the load saw no error, and that the three tables end alike.
#
# Usage: internal/upgradetest/run.sh [REV]      (make test-upgrade)
# Ports 127.0.0.1:21101 to 21143 (LC_UPGRADE_PORT=211 moves the prefix).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd -P)
rev=${1:-57b4749}
p=${LC_UPGRADE_PORT:-211}
store=${LC_UPGRADE_STORE:-wal}
work=$(mktemp -d)
declare -A pid
fail() { echo "upgrade test: FAIL: $*" >&2; failed=1; }
failed=0
# shellcheck disable=SC2317 # called by the trap
cleanup() {
	for i in 1 2 3; do [ -n "${pid[$i]:-}" ] && kill -TERM "${pid[$i]}" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/old"
git -C "$root" archive "$rev" | tar -x -C "$work/old" || { echo "upgrade test: no revision $rev" >&2; exit 1; }
(cd "$work/old" && go build -o "$work/lcd-old" ./cmd/lcd) || exit 1
(cd "$root" && go build -o "$work/lcd-new" ./cmd/lcd && go build -o "$work/lc-cli" ./cmd/lc-cli &&
	go build -o "$work/load" ./internal/upgradetest) || exit 1

peers="n1=127.0.0.1:${p}41=127.0.0.1:${p}01,n2=127.0.0.1:${p}42=127.0.0.1:${p}02,n3=127.0.0.1:${p}43=127.0.0.1:${p}03"
start() { # node binary
	NODE_ID=n$1 RAFT_PEERS=$peers RAFT_DIR=$work/n$1 RAFT_LOG_STORE=$store BIND_ADDRESS=127.0.0.1:${p}0$1 \
		MANAGER_ADDRESS=127.0.0.1:${p}1$1 METRICS_ADDRESS=127.0.0.1:${p}2$1 HTTP_ADDRESS=127.0.0.1:${p}3$1 \
		RAFT_ADDRESS=127.0.0.1:${p}4$1 LOG_LEVEL=info "$2" >>"$work/n$1.log" 2>&1 9>&- &
	pid[$1]=$!
}
status() { curl -s --max-time 2 "127.0.0.1:${p}2$1/cluster$2"; }
leader() { # waits for a ready leader, prints its number
	for _ in $(seq 150); do
		for i in 1 2 3; do
			case "$(status $i '')" in *'"state":"Leader"'*'"ready":true'*) echo $i; return;; esac
		done
		sleep 0.2
	done
	echo 0
}
counters() { # node: "commands entries" the node proposed as a leader, from one scrape
	curl -s --max-time 2 "127.0.0.1:${p}2$1/metrics" | awk '
		$1 == "locking_center_raft_proposed_commands_total" {c = $2}
		$1 == "locking_center_raft_proposed_entries_total" {e = $2}
		END {print c, e}'
}

for i in 1 2 3; do start $i "$work/lcd-old"; done
[ "$(leader)" != 0 ] || { fail "no leader on the old lcd"; exit 1; }
mkfifo "$work/stop"
"$work/load" "127.0.0.1:${p}01,127.0.0.1:${p}02,127.0.0.1:${p}03" <"$work/stop" >"$work/load.out" 2>&1 &
exec 9>"$work/stop"
sleep 3
for i in 1 2 3; do
	kill -TERM "${pid[$i]}"; wait "${pid[$i]}" || fail "n$i (old) exited $? at SIGTERM"
	start $i "$work/lcd-new"
	sleep 4
	l=$(leader)
	if [ "$i" = 2 ] && [ "$l" = 3 ]; then
		# The check below is of a new leader beside an old follower.
		"$work/lc-cli" --manager-address "127.0.0.1:${p}13" cluster transfer n1 || fail "no transfer to n1"
		sleep 4
		l=$(leader)
	fi
	read -r c e <<<"$(counters "$l")"
	echo "n$i upgraded; leader n$l proposed ${c:-none} commands in ${e:-none} entries"
	if [ "$i" = 2 ] && { [ -z "$c" ] || [ "$c" != "$e" ]; }; then
		fail "n$l (new) batched, or proposed nothing, while n3 ran the old lcd"
	fi
done
l=$(leader)
read -r c0 e0 <<<"$(counters "$l")"
sleep 4
read -r c1 e1 <<<"$(counters "$l")"
echo "all upgraded: leader n$l proposed $((c1 - c0)) commands in $((e1 - e0)) entries in 4 s"
[ $((e1 - e0)) -lt $((c1 - c0)) ] || fail "no batches once every node ran the new lcd"
exec 9>&-
for _ in $(seq 150); do grep -q '^cycles' "$work/load.out" && break; sleep 0.2; done
cat "$work/load.out"
grep -q '^cycles [1-9][0-9]* errors 0$' "$work/load.out" || fail "the load saw errors, or made no cycle"
for i in 1 2 3; do kill -0 "${pid[$i]}" 2>/dev/null || fail "n$i is not running"; done
if grep -il 'does not decode\|panic' "$work"/n?.log; then fail "a node met an entry it could not read, or panicked"; fi
same=
for _ in $(seq 50); do
	d=$(for i in 1 2 3; do status $i '?digest' | grep -o '"applied_index":[0-9]*\|"digest":"[0-9a-f]*"' | tr -d '\n'; echo; done | sort -u)
	[ "$(echo "$d" | wc -l)" = 1 ] && { same=$d; break; }
	sleep 0.2
done
if [ -n "$same" ]; then echo "tables alike: $same"; else fail "the tables differ: $d"; fi
[ $failed = 0 ] && echo "upgrade test: ok"
exit $failed
