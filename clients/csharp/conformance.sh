#!/usr/bin/env bash
# Builds the C# client with Mono's mcs, runs its unit tests (the protocol
# vectors included), then runs the live scenario against the server at
# $LC_ADDR. Build and test output goes to stderr; stdout carries only the
# lines "ok <id>" / "FAIL <id>: <reason>": unit-tests first, then the
# scenarios.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vectors="$here/../testdata/vectors.json"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

build_all() {
	local lib="$build/LockingCenter.Client.dll"
	mcs -target:library -warnaserror -doc:"$build/LockingCenter.Client.xml" -out:"$lib" \
		"$here"/LockingCenter.Client/*.cs &&
		mcs -warnaserror -r:"$lib" -out:"$build/LockingCenter.Client.Tests.exe" "$here"/LockingCenter.Client.Tests/*.cs \
			"$here"/SessionExample/Examples.cs &&
		mcs -warnaserror -r:"$lib" -out:"$build/Example.exe" "$here"/Example/*.cs &&
		mcs -warnaserror -r:"$lib" -out:"$build/Scenario.exe" "$here"/Scenario/*.cs
}

if ! build_all >&2; then
	echo "FAIL unit-tests: the C# client does not build (see stderr)"
	exit 1
fi

status=0
if mono "$build/LockingCenter.Client.Tests.exe" "$vectors" >"$build/unit.log" 2>&1; then echo "ok unit-tests"; else
	echo "FAIL unit-tests: $(tail -n 1 "$build/unit.log")" && status=1
fi
cat "$build/unit.log" >&2
mono "$build/Scenario.exe" || status=1
exit "$status"
