# What the two conformance harnesses share, run.sh (the v1 suite) and
# sessions.sh (the session suite): sourced by them, not run.
#
# harness_init prepares a run: toolchains (setup.sh), a work directory,
# lcd and the probe built into it, a silent server, and a trap that stops
# every server the harness started (started through serve_line or
# launch_lcd) and removes the work directory however the run ends. The
# caller sets the array `cells` (unit-tests, then its scenario ids) and
# `langs`; record, finish_language and print_matrix fill and print the
# matrix of `cell[LANG,ID]` and `reason[LANG,ID]`.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
all_langs=(go python javascript rust java csharp c cpp zig)
start_limit=20 # seconds for a server to report its addresses
stop_limit=10  # seconds for a server to exit after SIGTERM, before SIGKILL

declare -A cell reason
failed_langs=()
owned_pids=()

# check_langs NAME LANGUAGE...: exits 2 on a language that is not one of
# the nine.
check_langs() {
	local name=$1 lang
	shift
	for lang; do
		case " ${all_langs[*]} " in
		*" $lang "*) ;;
		*) echo "$name: unknown language '$lang' (want: ${all_langs[*]})" >&2; exit 2 ;;
		esac
	done
}

# harness_init NAME LANGUAGE...: installs the toolchains of the languages
# (setup.sh), makes the work directory $work, builds $work/lcd and the
# probe ($LC_PROBE), and starts the silent server ($LC_SILENT_ADDR). Exits
# 2 when any of it fails.
harness_init() {
	harness=$1
	shift
	export LC_TOOLS=${LC_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/locking-center/tools}
	export PATH="$LC_TOOLS/bin:$PATH"
	if ! bash "$root/clients/conformance/setup.sh" "$@"; then
		echo "$harness: setup failed" >&2
		exit 2
	fi
	work=$(mktemp -d)
	trap harness_cleanup EXIT
	trap 'exit 130' INT TERM
	echo "building lcd and probe" >&2
	if ! (cd "$root" && go build -o "$work/lcd" ./cmd/lcd && go build -o "$work/probe" ./clients/conformance/probe); then
		echo "$harness: build failed" >&2
		exit 2
	fi
	export LC_PROBE="$work/probe"
	# One silent server for every language: it accepts connections and
	# never answers them.
	if ! serve_line LC_SILENT_ADDR "$work/silent" "$LC_PROBE" silent-server; then
		echo "$harness: probe silent-server did not start:" >&2
		cat "$work/silent.err" >&2
		exit 2
	fi
	export LC_SILENT_ADDR
}

# harness_cleanup stops the servers and removes the work directory, or
# keeps it, and says where, when LC_KEEP_WORK is set.
harness_cleanup() {
	stop_pids "${owned_pids[@]}"
	if [ -n "${LC_KEEP_WORK:-}" ]; then
		echo "$harness: the work directory is kept: $work" >&2
	else
		rm -rf "$work"
	fi
}

# serve_line VAR BASE COMMAND...: starts COMMAND in the background, its
# standard output in BASE.out and its standard error in BASE.err, waits
# for the first line it prints and sets VAR to it, and pid to its process.
# Fails when the command exits first or prints nothing in time.
serve_line() {
	# Locals of names a caller will not pass as VAR: printf -v sets the
	# innermost variable of that name.
	local _var=$1 _base=$2 _first _deadline
	shift 2
	: >"$_base.out" # there before the first read below, which may come before the command's first write
	"$@" >"$_base.out" 2>"$_base.err" &
	pid=$!
	disown "$pid" # no job notice when it ends by a signal; stop_pids ends it
	owned_pids+=("$pid")
	_deadline=$((SECONDS + start_limit))
	until read -r _first <"$_base.out" 2>/dev/null && [ -n "$_first" ]; do
		if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $_deadline ]; then
			return 1
		fi
		sleep 0.05
	done
	printf -v "$_var" '%s' "$_first"
}

# launch_lcd LOG [VAR=VALUE...]: starts lcd on 127.0.0.1 port 0 with the
# settings given (beside those of the environment), its log in LOG, and
# sets pid to its process. await_lcd reads its addresses.
launch_lcd() {
	local log=$1
	shift
	env BIND_ADDRESS=127.0.0.1:0 SHUTDOWN_TIMEOUT=1s LOG_FORMAT=text "$@" "$work/lcd" 2>"$log" &
	pid=$!
	disown "$pid" # no job notice when a scenario kills it
	owned_pids+=("$pid")
}

# await_lcd LOG PID: waits until the lcd of PID logs its bound addresses
# in LOG and sets mutex_addr and manager_addr. Fails, showing its log,
# when it exits first or does not start in time.
await_lcd() {
	local log=$1 pid=$2 line deadline
	deadline=$((SECONDS + start_limit))
	while :; do
		line=$(grep -m1 'msg="lcd started"' "$log" 2>/dev/null)
		[ -n "$line" ] && break
		if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
			echo "$harness: lcd did not start ($log):" >&2
			cat "$log" >&2
			return 1
		fi
		sleep 0.05
	done
	mutex_addr=$(sed -E 's/.* mutex=([^ ]+).*/\1/' <<<"$line")
	manager_addr=$(sed -E 's/.* manager=([^ ]+).*/\1/' <<<"$line")
}

# stop_pids PID...: ends the processes: SIGCONT (one that a scenario
# stopped), then SIGTERM, and SIGKILL to any still running stop_limit
# seconds later. Processes that have ended already are passed over.
stop_pids() {
	local pid deadline
	[ $# -gt 0 ] || return 0
	for pid; do
		kill -CONT "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
	done
	deadline=$((SECONDS + stop_limit))
	for pid; do
		while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
		kill -KILL "$pid" 2>/dev/null
	done
	forget_pids "$@"
}

# forget_pids PID...: takes the processes off the list the cleanup stops.
forget_pids() {
	local pid keep=()
	for pid in "${owned_pids[@]}"; do
		case " $* " in *" $pid "*) ;; *) keep+=("$pid") ;; esac
	done
	owned_pids=("${keep[@]}")
}

# run_script [VAR=VALUE...]: runs $script from the repository root with
# the settings given added to the environment, its standard output in
# $out and its standard error in $err, for at most timeout_s seconds, and
# sets rc to its exit status (124: it timed out). A signal that ends the
# harness meanwhile ends the script too: the cleanup stops it.
run_script() {
	local p
	(cd "$root" && exec env "$@" timeout --kill-after=10 "$timeout_s" bash "$script") >"$out" 2>"$err" &
	p=$!
	owned_pids+=("$p")
	wait "$p"
	rc=$?
	forget_pids "$p"
}

# begin_language LANG SCRIPT: starts the run of LANG: sets dir (its part
# of the work directory), out and err (where its script's standard output
# and error go), script (clients/LANG/SCRIPT) and started. Fails every
# cell of LANG, and returns 1, when it has no such script.
begin_language() {
	local lang=$1 name=$2
	dir="$work/$lang" script="$root/clients/$lang/$name"
	mkdir -p "$dir"
	out="$dir/out" err="$dir/err"
	: >"$out" >"$err"
	echo "== $lang" >&2
	started=$SECONDS
	if [ ! -f "$script" ]; then
		fail_all "$lang" "clients/$lang/$name does not exist"
		return 1
	fi
}

# fail_all LANG REASON: fails every cell of LANG for REASON.
fail_all() {
	local lang=$1 id
	for id in "${cells[@]}"; do cell[$lang,$id]=FAIL reason[$lang,$id]=$2; done
	failed_langs+=("$lang")
}

# record LANG OUTFILE: fills cell[LANG,id] and reason[LANG,id] from the
# script's output. A FAIL line for an id wins over an ok line.
record() {
	local lang=$1 out=$2 verdict id rest line
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

# finish_language LANG RC WHY ERRFILE [LOG...]: after record, passes the
# unit-tests cell of a script that printed no such line but went on to its
# scenarios, fails every cell without a line (WHY says what else went
# wrong, or is empty), and for a language with a failed cell shows the end
# of its standard error and of each LOG.
finish_language() {
	local lang=$1 rc=$2 also=$3 err=$4 why id lines=0 failed=false log
	shift 4
	for id in "${cells[@]:1}"; do [ -n "${cell[$lang,$id]:-}" ] && lines=$((lines + 1)); done
	if [ -z "${cell[$lang,unit-tests]:-}" ] && [ $lines -gt 0 ]; then
		cell[$lang,unit-tests]=ok
	fi
	why="no line for it (exit status $rc)"
	[ "$rc" -eq 124 ] && why="no line for it (timed out after ${timeout_s}s)"
	[ -n "$also" ] && why="$why; $also"
	for id in "${cells[@]}"; do
		[ -n "${cell[$lang,$id]:-}" ] || cell[$lang,$id]=FAIL reason[$lang,$id]=$why
		[ "${cell[$lang,$id]}" = FAIL ] && failed=true
	done
	$failed || return 0
	failed_langs+=("$lang")
	echo "-- $lang: standard error (last 60 lines)" >&2
	tail -n 60 "$err" >&2
	for log; do
		echo "-- $lang: $(basename "$log") (last 20 lines)" >&2
		tail -n 20 "$log" >&2
	done
}

# print_matrix: one row per language, one column per cell, the reasons of
# the failed cells, and `N passed, M failed`; returns non-zero when a cell
# failed.
print_matrix() {
	local i lang id same passed=0 failed=0
	echo
	echo "columns:"
	for i in "${!cells[@]}"; do printf '  %2d %s\n' "$i" "${cells[$i]}"; done
	printf '%-11s' language
	for i in "${!cells[@]}"; do printf ' %-4s' "$i"; done
	echo
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
}
