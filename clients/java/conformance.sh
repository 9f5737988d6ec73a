#!/usr/bin/env bash
# Conformance run of the Java client (see clients/conformance/run.sh): build
# with javac, unit tests and the example, then the live scenarios against
# $LC_ADDR. Needs only a JDK 17+.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
rm -rf build/classes build/test-classes
mkdir -p build/classes build/test-classes
if javac -Xlint:all,-try -Werror --release 17 -d build/classes $(find src/main/java -name '*.java') >&2 &&
	javac -Xlint:all,-try -Werror --release 17 -cp build/classes -d build/test-classes $(find src/test/java -name '*.java') >&2 &&
	java -cp build/classes:build/test-classes io.github.lockingcenter.AllTests >&2 &&
	java -cp build/classes examples/Example.java "$LC_ADDR" >&2; then
	echo "ok unit-tests"
else
	echo "FAIL unit-tests: build, unit tests or the example failed"
	exit 1
fi
java -cp build/classes:build/test-classes io.github.lockingcenter.Conformance
