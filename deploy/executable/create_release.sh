#!/bin/sh
# Cross-compiles the release archives of Locking-Center.
#
# Usage: deploy/executable/create_release.sh [output-directory]
#
# Writes into the output directory (default: dist/ at the top of the tree):
#   locking-center_<version>_<os>_<arch>.tar.gz  lcd and lc-cli, for linux
#                                                and darwin on amd64 and arm64
#   lc-cli_<version>_windows_<arch>.zip          lc-cli.exe, amd64 and arm64
#   locking-center_<version>_checksums.txt       SHA-256 of each archive
#
# Every binary is static (CGO off) and carries the version and commit, see
# `lcd --version` and `lc-cli version`.
#
# Environment:
#   VERSION  release version (default: git describe, see deploy/version.sh)
#   COMMIT   commit stamped next to it (default: short hash of HEAD)
#   GO       Go command to build with (default: go)
#
# Needs go, tar, gzip, zip and sha256sum or shasum; plain POSIX sh.
set -eu

die() {
	printf 'create_release: %s\n' "$*" >&2
	exit 1
}

here=$(cd "$(dirname "$0")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
out=${1:-$root/dist}
GO=${GO:-go}
# shellcheck source=deploy/version.sh
. "$root/deploy/version.sh"

for cmd in lcd lc-cli; do
	found=no
	for f in "$root/cmd/$cmd"/*.go; do
		[ -e "$f" ] && found=yes
		break
	done
	[ "$found" = yes ] || die "cmd/$cmd has no Go sources: $cmd cannot be built"
done
for tool in "$GO" tar gzip zip; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is needed and was not found in PATH"
done
if command -v sha256sum >/dev/null 2>&1; then
	sha256() { sha256sum "$@"; }
elif command -v shasum >/dev/null 2>&1; then
	sha256() { shasum -a 256 "$@"; }
else
	die "sha256sum or shasum is needed and neither was found in PATH"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd -P)
work=$(mktemp -d "${TMPDIR:-/tmp}/lc-release.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# build GOOS GOARCH COMMAND OUTPUT
build() {
	printf 'building %s for %s/%s\n' "$3" "$1" "$2"
	(cd "$root" && CGO_ENABLED=0 GOOS=$1 GOARCH=$2 "$GO" build -trimpath -buildvcs=false \
		-ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" \
		-o "$4" "./cmd/$3")
}

# stage DIRECTORY: the documents that travel with every archive.
stage() {
	for doc in LICENSE README.md; do
		if [ -f "$root/$doc" ]; then cp "$root/$doc" "$1/"; fi
	done
}

archives=
for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
	os=${target%/*} arch=${target#*/}
	name=locking-center_${VERSION}_${os}_${arch}
	mkdir "$work/$name"
	build "$os" "$arch" lcd "$work/$name/lcd"
	build "$os" "$arch" lc-cli "$work/$name/lc-cli"
	stage "$work/$name"
	(cd "$work" && tar -cf - "$name" | gzip -9 -n >"$out/$name.tar.gz")
	archives="$archives $name.tar.gz"
done
for arch in amd64 arm64; do
	name=lc-cli_${VERSION}_windows_${arch}
	mkdir "$work/$name"
	build windows "$arch" lc-cli "$work/$name/lc-cli.exe"
	stage "$work/$name"
	rm -f "$out/$name.zip"
	(cd "$work" && zip -q -r -X "$out/$name.zip" "$name")
	archives="$archives $name.zip"
done

sums=locking-center_${VERSION}_checksums.txt
# The archive names carry no spaces, so the list splits safely.
# shellcheck disable=SC2086
(cd "$out" && sha256 $archives >"$sums")
printf 'wrote to %s:\n' "$out"
for f in $archives $sums; do printf '  %s\n' "$f"; done
