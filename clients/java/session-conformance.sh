#!/usr/bin/env bash
# Session conformance run of the Java client (clients/conformance/SESSIONS.md):
# build with javac (a JDK 17+ and nothing else), the session unit tests (the
# codec against the shared vectors, mutated frames, 64 threads on one
# session, the README's examples) against the harness's lcd, then the
# scenario program against the servers the harness started.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
out=build/session
rm -rf "$out"
mkdir -p "$out/classes" "$out/test-classes"
if ! javac -Xlint:all,-try -Werror --release 17 -d "$out/classes" $(find src/main/java -name '*.java') >&2 ||
	! javac -Xlint:all,-try -Werror --release 17 -cp "$out/classes" -d "$out/test-classes" $(find src/test/java -name '*.java') >&2; then
	echo "FAIL unit-tests: the build failed (see standard error)"
	exit 1
fi
cp=$out/classes:$out/test-classes
if timeout 100 java -Dvectors=../testdata/session-vectors.json -cp "$cp" io.github.lockingcenter.SessionTests >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: the session unit tests failed (see standard error)"
fi
timeout 115 java -cp "$cp" io.github.lockingcenter.SessionConformance
