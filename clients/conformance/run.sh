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

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
all_langs=(go python javascript rust java csharp c cpp zig)
scenarios=(lock-unlock trylock-busy fifo-three wait-holds-nothing reset-key
	reset-source-withdraws key-127-ok-128-refused binary-key refused-connection cancel-withdraws
	silent-server-times-out)
cells=(unit-tests "${scenarios[@]}")
start_limit=20 # seconds for lcd to report its addresses

langs=("$@")
[ ${#langs[@]} -gt 0 ] || langs=("${all_langs[@]}")
for lang in "${langs[@]}"; do
	case " ${all_langs[*]} " in
	*" $lang "*) ;;
	*) echo "run.sh: unknown language '$lang' (want: ${all_langs[*]})" >&2; exit 2 ;;
	esac
done

export LC_TOOLS=${LC_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/locking-center/tools}
export PATH="$LC_TOOLS/bin:$PATH"
timeout_s=${LC_LANGUAGE_TIMEOUT:-1200}

if ! bash "$root/clients/conformance/setup.sh" "${langs[@]}"; then
	echo "run.sh: setup failed" >&2
	exit 2
fi

work=$(mktemp -d)
lcd_pid=
silent_pid=
cleanup() {
	local pid
	for pid in "$lcd_pid" "$silent_pid"; do
		[ -n "$pid" ] || continue
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building lcd and probe" >&2
if ! (cd "$root" && go build -o "$work/lcd" ./cmd/lcd && go build -o "$work/probe" ./clients/conformance/probe); then
	echo "run.sh: build failed" >&2
	exit 2
fi
export LC_PROBE="$work/probe"

# One silent server for every language: it accepts connections and never
# answers them.
: >"$work/silent.addr" # there before the first read below, which may come before the server's first write
"$LC_PROBE" silent-server >"$work/silent.addr" 2>"$work/silent.err" &
silent_pid=$!
deadline=$((SECONDS + start_limit))
until read -r LC_SILENT_ADDR <"$work/silent.addr" 2>/dev/null && [ -n "$LC_SILENT_ADDR" ]; do
	if ! kill -0 "$silent_pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
		echo "run.sh: probe silent-server did not start:" >&2
		cat "$work/silent.err" >&2
		exit 2
	fi
	sleep 0.05
done
export LC_SILENT_ADDR

# start_lcd LOG: starts lcd on 127.0.0.1 port 0, waits until it logs its
# bound addresses and sets lcd_pid, mutex_addr and manager_addr.
start_lcd() {
	local log=$1 line deadline
	BIND_ADDRESS=127.0.0.1:0 SHUTDOWN_TIMEOUT=1s LOG_FORMAT=text "$work/lcd" 2>"$log" &
	lcd_pid=$!
	deadline=$((SECONDS + start_limit))
	while :; do
		line=$(grep -m1 'msg="lcd started"' "$log" 2>/dev/null)
		[ -n "$line" ] && break
		if ! kill -0 "$lcd_pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
			echo "run.sh: lcd did not start:" >&2
			cat "$log" >&2
			return 1
		fi
		sleep 0.05
	done
	mutex_addr=$(sed -E 's/.* mutex=([^ ]+).*/\1/' <<<"$line")
	manager_addr=$(sed -E 's/.* manager=([^ ]+).*/\1/' <<<"$line")
}

stop_lcd() {
	kill -TERM "$lcd_pid" 2>/dev/null
	wait "$lcd_pid" 2>/dev/null
	lcd_pid=
}

declare -A cell reason
failed_langs=()

# record LANG OUTFILE: fills cell[LANG,id] and reason[LANG,id] from the
# script's output. A FAIL line for an id wins over an ok line.
record() {
	local lang=$1 out=$2 verdict id rest
	while IFS= read -r line; do
		[[ $line =~ ^(ok|FAIL)\ ([a-z0-9-]+)(:\ ?(.*))?$ ]] || continue
		verdict=${BASH_REMATCH[1]} id=${BASH_REMATCH[2]} rest=${BASH_REMATCH[4]}
		case " ${cells[*]} " in *" $id "*) ;; *) continue ;; esac
		if [ "$verdict" = FAIL ]; then
			cell[$lang,$id]=FAIL
			reason[$lang,$id]=${rest:-no reason given}
		elif [ "${cell[$lang,$id]:-}" != FAIL ]; then
			cell[$lang,$id]=ok
		fi
	done <"$out"
}

for lang in "${langs[@]}"; do
	script="$root/clients/$lang/conformance.sh"
	out="$work/$lang.out" err="$work/$lang.err" lcdlog="$work/$lang.lcd.log"
	: >"$out" >"$err"
	echo "== $lang" >&2
	started=$SECONDS
	if [ ! -f "$script" ]; then
		missing="clients/$lang/conformance.sh does not exist"
		for id in "${cells[@]}"; do cell[$lang,$id]=FAIL reason[$lang,$id]=$missing; done
		failed_langs+=("$lang")
		continue
	fi
	if ! start_lcd "$lcdlog"; then
		for id in "${cells[@]}"; do cell[$lang,$id]=FAIL reason[$lang,$id]="lcd did not start"; done
		failed_langs+=("$lang")
		continue
	fi
	dead_addr=$("$LC_PROBE" free-addr)
	(cd "$root" && LC_ADDR=$mutex_addr LC_MANAGER_ADDR=$manager_addr LC_DEAD_ADDR=$dead_addr \
		timeout --kill-after=10 "$timeout_s" bash "$script") >"$out" 2>"$err"
	rc=$?
	echo "== $lang: conformance.sh exited $rc after $((SECONDS - started)) s" >&2
	lcd_alive=true
	kill -0 "$lcd_pid" 2>/dev/null || lcd_alive=false
	stop_lcd
	record "$lang" "$out"
	scenario_lines=0
	for id in "${scenarios[@]}"; do [ -n "${cell[$lang,$id]:-}" ] && scenario_lines=$((scenario_lines + 1)); done
	if [ -z "${cell[$lang,unit-tests]:-}" ] && [ $scenario_lines -gt 0 ]; then
		cell[$lang,unit-tests]=ok
	fi
	why="no line for it (conformance.sh exit status $rc)"
	[ $rc -eq 124 ] && why="no line for it (conformance.sh timed out after ${timeout_s}s)"
	$lcd_alive || why="$why; lcd died during the run"
	lang_failed=false
	for id in "${cells[@]}"; do
		if [ -z "${cell[$lang,$id]:-}" ]; then
			cell[$lang,$id]=FAIL reason[$lang,$id]=$why
		fi
		[ "${cell[$lang,$id]}" = FAIL ] && lang_failed=true
	done
	if $lang_failed; then
		failed_langs+=("$lang")
		echo "-- $lang: standard error (last 60 lines)" >&2
		tail -n 60 "$err" >&2
		echo "-- $lang: lcd log (last 20 lines)" >&2
		tail -n 20 "$lcdlog" >&2
	fi
done

# The matrix: one row per language, one column per cell.
echo
echo "columns:"
for i in "${!cells[@]}"; do printf '  %2d %s\n' "$i" "${cells[$i]}"; done
printf '%-11s' language
for i in "${!cells[@]}"; do printf ' %-4s' "$i"; done
echo
passed=0 failed=0
for lang in "${langs[@]}"; do
	printf '%-11s' "$lang"
	for id in "${cells[@]}"; do
		printf ' %-4s' "${cell[$lang,$id]}"
		if [ "${cell[$lang,$id]}" = ok ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
	done
	echo
done
if [ ${#failed_langs[@]} -gt 0 ]; then
	echo
	echo "failures:"
	for lang in "${failed_langs[@]}"; do
		# One line when every cell failed for the same reason.
		same=true
		for id in "${cells[@]}"; do
			[ "${cell[$lang,$id]}" = FAIL ] && [ "${reason[$lang,$id]}" = "${reason[$lang,unit-tests]:-}" ] || same=false
		done
		if $same; then
			echo "  $lang (every cell): ${reason[$lang,unit-tests]}"
			continue
		fi
		for id in "${cells[@]}"; do
			[ "${cell[$lang,$id]}" = FAIL ] && echo "  $lang $id: ${reason[$lang,$id]}"
		done
	done
fi
echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
