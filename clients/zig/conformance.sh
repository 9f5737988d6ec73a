#!/usr/bin/env bash
# Builds the Zig client with `zig build`, runs its unit tests (the protocol
# vectors included), then runs the live scenario against the server at
# $LC_ADDR. Build and test output goes to stderr; stdout carries only the
# lines "ok <id>" / "FAIL <id>: <reason>": unit-tests first, then the
# scenarios. zig comes from PATH or $LC_TOOLS/bin (clients/conformance/setup.sh
# puts it there).
set -uo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/build-env.sh"
zig_install v1-programs

status=0
if LC_VECTORS="$here/../testdata/vectors.json" zig_build test --summary all >"$build/unit.log" 2>&1; then echo "ok unit-tests"; else
	echo "FAIL unit-tests: $(grep -m1 'Build Summary' "$build/unit.log" || tail -n 1 "$build/unit.log")" && status=1
fi
cat "$build/unit.log" >&2
"$build/out/bin/scenario" || status=1
exit "$status"
