# Sourced by conformance.sh and session-conformance.sh: finds zig (PATH or
# $LC_TOOLS/bin, where clients/conformance/setup.sh puts it), makes a build
# directory that goes at exit, and defines zig_build, which keeps the build
# state out of the source tree. Without zig it prints the unit-tests cell's
# FAIL line and exits.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT

zig=$(command -v zig || true)
[ -n "$zig" ] || [ ! -x "${LC_TOOLS:-}/bin/zig" ] || zig=$LC_TOOLS/bin/zig
if [ -z "$zig" ]; then
	echo "FAIL unit-tests: zig not found on PATH or in \$LC_TOOLS/bin (run clients/conformance/setup.sh zig)"
	exit 1
fi

zig_build() {
	(cd "$here" && "$zig" build --cache-dir "$build/cache" --prefix "$build/out" "$@")
}

# zig_install STEP: builds the programs of STEP (Debug: an optimized build
# takes LLVM many minutes on a busy machine); on failure prints the
# unit-tests cell's FAIL line and exits.
zig_install() {
	if ! zig_build "$1" >&2; then
		echo "FAIL unit-tests: the Zig client does not build (see stderr)"
		exit 1
	fi
}
