#!/usr/bin/env bash
# Runs every session client's conformance script against fresh servers and
# prints a matrix of the results: the session suite, whose contract is
# clients/conformance/SESSIONS.md.
#
#   clients/conformance/sessions.sh [LANGUAGE...]
#
# Languages: by default those that have clients/<language>/session-conformance.sh;
# a language named here without one fails all its cells. For each one the
# harness starts, on free 127.0.0.1 ports:
#
#   - a single lcd with SESSION_TTL_MIN=1s, and a proxy to it (probe proxy);
#   - an lcd with TLS (certificates made for this run by probe tls-files)
#     and a tokens file of one client token limited to the keys <language>/;
#   - an lcd started on a write-ahead log whose next fencing token is above
#     2^63 (probe big-token-wal);
#   - a cluster of three lcd nodes (BoltDB raft log store), once one leads;
#
# runs clients/<language>/session-conformance.sh from the repository root
# with the environment SESSIONS.md lists (LC_ADDR, LC_MANAGER_ADDR,
# LC_PROXY_ADDR, LC_PROXY_CTL, LC_TLS_ADDR, LC_CA_FILE, LC_TOKEN,
# LC_BIG_ADDR, LC_BIG_MANAGER, LC_CLUSTER, LC_CLUSTER_MANAGER, LC_CLUSTER_PIDS,
# LC_DEAD_ADDR, LC_SILENT_ADDR, LC_PROBE, LC_TOOLS), reads the lines
# `ok <id>` and `FAIL <id>: <reason>` from its standard output, and stops
# every server. Cells: unit-tests, then one per scenario, as run.sh counts
# them.
#
#   LC_LANGUAGE_TIMEOUT  seconds one language's script may take, build included (default 600)
#
# The last line is `N passed, M failed`, counting cells. The exit status is
# non-zero when any cell failed.
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
scenarios=(s-acquire-release s-try-busy s-wait-bound s-cancel s-stale-release s-lease-expiry
	s-kill-client s-resume s-leader-stop s-leader-kill s-tls-token s-modes s-note s-big-token
	s-silent-server s-fifo-mixed)
cells=(unit-tests "${scenarios[@]}")

langs=("$@")
if [ ${#langs[@]} -eq 0 ]; then
	for lang in "${all_langs[@]}"; do
		[ -f "$root/clients/$lang/session-conformance.sh" ] && langs+=("$lang")
	done
	if [ ${#langs[@]} -eq 0 ]; then
		echo "sessions.sh: no language has a session-conformance.sh" >&2
		exit 2
	fi
fi
check_langs sessions.sh "${langs[@]}"
timeout_s=${LC_LANGUAGE_TIMEOUT:-600}
# Toolchains only for the languages that have a script: the others fail
# without running anything. Go builds lcd and the probe.
with_script=(go)
for lang in "${langs[@]}"; do
	[ -f "$root/clients/$lang/session-conformance.sh" ] && with_script+=("$lang")
done
harness_init sessions.sh "${with_script[@]}"

tls="$work/tls"
mkdir -p "$tls"
if ! "$LC_PROBE" tls-files "$tls"; then
	echo "sessions.sh: probe tls-files failed" >&2
	exit 2
fi

# start_servers DIR LANG: starts the servers of one language, their files
# and logs in DIR, and sets the variables of its environment and
# lang_pids. Fails with why set when one does not start.
start_servers() {
	local dir=$1 lang=$2 i names=(single tls big n1 n2 n3) pids=() raft=() peers name token
	token=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
	printf '%s client %s %s/\n' "$lang" "$token" "$lang" >"$dir/tokens"
	if ! "$LC_PROBE" big-token-wal "$dir/big.wal"; then
		why="probe big-token-wal failed"
		return 1
	fi
	for i in 1 2 3; do
		raft+=("$("$LC_PROBE" free-addr)")
		peers+="${peers:+,}n$i=${raft[$((i - 1))]}"
	done
	# All at once, then each awaited: their starts overlap.
	launch_lcd "$dir/single.log" HTTP_ADDRESS= SESSION_TTL_MIN=1s
	pids+=("$pid")
	launch_lcd "$dir/tls.log" HTTP_ADDRESS= TLS_CERT_FILE="$tls/server.crt" TLS_KEY_FILE="$tls/server.key" \
		AUTH_TOKENS_FILE="$dir/tokens"
	pids+=("$pid")
	launch_lcd "$dir/big.log" HTTP_ADDRESS= DATA_PATH="$dir/big.wal"
	pids+=("$pid")
	for i in 1 2 3; do
		launch_lcd "$dir/n$i.log" HTTP_ADDRESS= NODE_ID="n$i" RAFT_ADDRESS="${raft[$((i - 1))]}" \
			RAFT_DIR="$dir/n$i" RAFT_PEERS="$peers" RAFT_LOG_STORE=boltdb
		pids+=("$pid")
	done
	lang_pids=("${pids[@]}")
	local mutex=() managers=()
	for i in "${!names[@]}"; do
		name=${names[$i]}
		if ! await_lcd "$dir/$name.log" "${pids[$i]}"; then
			why="lcd ($name) did not start"
			return 1
		fi
		mutex+=("$mutex_addr") managers+=("$manager_addr")
	done
	env_addr=${mutex[0]} env_manager=${managers[0]} env_tls=${mutex[1]} env_big=${mutex[2]} env_big_manager=${managers[2]}
	env_cluster=$(IFS=,; echo "${mutex[*]:3}")
	env_cluster_manager=$(IFS=,; echo "${managers[*]:3}")
	env_cluster_pids=$(IFS=,; echo "${pids[*]:3}")
	env_token=$token
	local line
	if ! serve_line line "$dir/proxy" "$LC_PROBE" proxy "$env_addr"; then
		why="probe proxy did not start: $(cat "$dir/proxy.err")"
		return 1
	fi
	lang_pids+=("$pid")
	env_proxy=${line% *} env_proxy_ctl=${line#* }
	if ! "$LC_PROBE" leader "$env_cluster_manager" >/dev/null 2>"$dir/leader.err"; then
		why="the cluster elected no leader: $(cat "$dir/leader.err")"
		return 1
	fi
}

for lang in "${langs[@]}"; do
	begin_language "$lang" session-conformance.sh || continue
	lang_pids=() why=
	if ! start_servers "$dir" "$lang"; then
		echo "sessions.sh: $lang: $why" >&2
		stop_pids "${lang_pids[@]}"
		fail_all "$lang" "$why"
		continue
	fi
	echo "== $lang: servers up after $((SECONDS - started)) s" >&2
	run_script LC_ADDR="$env_addr" LC_MANAGER_ADDR="$env_manager" \
		LC_PROXY_ADDR="$env_proxy" LC_PROXY_CTL="$env_proxy_ctl" \
		LC_TLS_ADDR="$env_tls" LC_CA_FILE="$tls/ca.crt" LC_TOKEN="$env_token" \
		LC_BIG_ADDR="$env_big" LC_BIG_MANAGER="$env_big_manager" \
		LC_CLUSTER="$env_cluster" LC_CLUSTER_MANAGER="$env_cluster_manager" LC_CLUSTER_PIDS="$env_cluster_pids" \
		LC_DEAD_ADDR="$("$LC_PROBE" free-addr)"
	echo "== $lang: session-conformance.sh exited $rc after $((SECONDS - started)) s" >&2
	# Every server but the cluster's nodes (s-leader-kill kills one)
	# must outlive the run.
	for i in 0 1 2 6; do
		kill -0 "${lang_pids[$i]}" 2>/dev/null || why="${why:+$why; }a server died during the run (pid ${lang_pids[$i]})"
	done
	stop_pids "${lang_pids[@]}"
	record "$lang" "$out"
	finish_language "$lang" "$rc" "$why" "$err" "$dir"/{single,tls,big,n1,n2,n3}.log
done

print_matrix
