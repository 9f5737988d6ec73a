#!/usr/bin/env bash
# Runs every client's conformance script against a fresh lcd and prints a
# matrix of the results.
#
#   clients/conformance/run.sh [LANGUAGE...]
#
# Languages: go python javascript rust java csharp c cpp zig (all when none
# are given). For each one the harness starts lcd on free 127.0.0.1 ports,
# runs clients/<language>/conformance.sh with
#
#   LC_ADDR          the mutex port, host:port
#   LC_MANAGER_ADDR  the management port, host:port
#   LC_DEAD_ADDR     a 127.0.0.1 address where nothing listens
#   LC_SILENT_ADDR   a 127.0.0.1 address that accepts connections and never
#                    answers (probe silent-server)
#   LC_PROBE         the probe binary (clients/conformance/probe)
#   LC_TOOLS         where setup.sh installs toolchains; $LC_TOOLS/bin is on PATH
#
# and reads the lines `ok <id>` and `FAIL <id>: <reason>` from its standard
# output. Cells: unit-tests (the script's own `ok unit-tests` line; a script
# that prints none passes this cell when it went on to run its scenarios),
# then one per scenario. Other output is ignored; standard error is shown
# when a language has a failed cell.
#
#   LC_LANGUAGE_TIMEOUT  seconds one language may take, build included (default 1200)
#
# The last line is `N passed, M failed`, counting cells. The exit status is
# non-zero when any cell failed.
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/harness.sh"
scenarios=(lock-unlock trylock-busy fifo-three wait-holds-nothing reset-key
	reset-source-withdraws key-127-ok-128-refused binary-key refused-connection cancel-withdraws
	silent-server-times-out)
cells=(unit-tests "${scenarios[@]}")

langs=("$@")
[ ${#langs[@]} -gt 0 ] || langs=("${all_langs[@]}")
check_langs run.sh "${langs[@]}"
timeout_s=${LC_LANGUAGE_TIMEOUT:-1200}
harness_init run.sh "${langs[@]}"

for lang in "${langs[@]}"; do
	begin_language "$lang" conformance.sh || continue
	lcdlog="$dir/lcd.log"
	launch_lcd "$lcdlog"
	lcd_pid=$pid
	if ! await_lcd "$lcdlog" "$lcd_pid"; then
		stop_pids "$lcd_pid"
		fail_all "$lang" "lcd did not start"
		continue
	fi
	dead_addr=$("$LC_PROBE" free-addr)
	run_script LC_ADDR="$mutex_addr" LC_MANAGER_ADDR="$manager_addr" LC_DEAD_ADDR="$dead_addr"
	echo "== $lang: conformance.sh exited $rc after $((SECONDS - started)) s" >&2
	why=
	kill -0 "$lcd_pid" 2>/dev/null || why="lcd died during the run"
	stop_pids "$lcd_pid"
	record "$lang" "$out"
	finish_language "$lang" "$rc" "$why" "$err" "$lcdlog"
done

print_matrix
