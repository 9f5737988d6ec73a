#!/usr/bin/env bash
# Session conformance run of the C# client (clients/conformance/SESSIONS.md):
# builds the client and its programs with Mono's mcs, runs the unit tests
# (the session codec against clients/testdata/session-vectors.json among
# them, and the live tests against LC_ADDR), then the session scenarios against the harness's servers. Build and
# test output goes to standard error; standard output carries only the lines
# "ok <id>" / "FAIL <id>: <reason>".
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

build_all() {
	local lib="$build/LockingCenter.Client.dll"
	mcs -target:library -warnaserror -out:"$lib" "$here"/LockingCenter.Client/*.cs &&
		mcs -warnaserror -r:"$lib" -out:"$build/LockingCenter.Client.Tests.exe" "$here"/LockingCenter.Client.Tests/*.cs \
			"$here"/SessionExample/Examples.cs &&
		mcs -warnaserror -r:"$lib" -out:"$build/SessionExample.exe" "$here"/SessionExample/*.cs &&
		mcs -warnaserror -r:"$lib" -out:"$build/SessionBench.exe" "$here"/Bench/*.cs &&
		mcs -warnaserror -r:"$lib" -out:"$build/SessionScenario.exe" "$here"/SessionScenario/*.cs
}

if ! build_all >&2; then
	echo "FAIL unit-tests: the C# client does not build (see standard error)"
	for id in s-acquire-release s-try-busy s-wait-bound s-cancel s-stale-release s-lease-expiry s-kill-client \
		s-resume s-leader-stop s-leader-kill s-tls-token s-modes s-note s-big-token s-silent-server s-fifo-mixed; do
		echo "FAIL $id: the C# client does not build"
	done
	exit 1
fi

status=0
if mono "$build/LockingCenter.Client.Tests.exe" "$here/../testdata/vectors.json" >"$build/unit.log" 2>&1; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: $(grep -m1 '^FAIL' "$build/unit.log" || tail -n 1 "$build/unit.log")"
	status=1
fi
cat "$build/unit.log" >&2
mono "$build/SessionScenario.exe" || status=1
exit "$status"
