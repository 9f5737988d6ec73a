#!/usr/bin/env bash
# Builds the C# client and its session benchmark with Mono's mcs and runs it
# against the lcd at ADDRESS; with --go, the Go client's figure in the same
# rounds (the Go program of clients/python/bench/session_bench.py, built
# offline with the repository's module).
#
#   bash clients/csharp/Bench/session-bench.sh ADDRESS [--workers 16] [--seconds 5] [--rounds 3] [--go]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
mcs -target:library -optimize+ -out:"$build/LockingCenter.Client.dll" "$here"/LockingCenter.Client/*.cs
mcs -optimize+ -r:"$build/LockingCenter.Client.dll" -out:"$build/SessionBench.exe" "$here"/Bench/*.cs
args=()
for a in "$@"; do
	if [ "$a" = --go ]; then
		gobin=$(cd "$here/../python/bench" && python3 -c 'import session_bench; print(session_bench.go_binary())')
		args+=(--go "$gobin")
	else
		args+=("$a")
	fi
done
mono "$build/SessionBench.exe" "${args[@]}"
