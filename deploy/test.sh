#!/bin/sh
# Tests of everything under deploy/ and of the top-level Dockerfile; the
# tests themselves are the Go module in deploy/verify.
#
# Usage: deploy/test.sh [go test flags...]     e.g. deploy/test.sh -run Kubernetes -v
#
# Installs the tools the tests call when they are missing, with apt-get:
# promtool (package prometheus), shellcheck, zip and systemd-analyze.
set -eu

here=$(cd "$(dirname "$0")" && pwd -P)

need=
command -v promtool >/dev/null 2>&1 || need="$need prometheus"
command -v shellcheck >/dev/null 2>&1 || need="$need shellcheck"
command -v zip >/dev/null 2>&1 || need="$need zip"
command -v systemd-analyze >/dev/null 2>&1 || need="$need systemd"
if [ -n "$need" ]; then
	if ! command -v apt-get >/dev/null 2>&1; then
		printf 'deploy/test.sh: missing%s, and no apt-get to install them\n' "$need" >&2
		exit 1
	fi
	printf 'deploy/test.sh: installing%s\n' "$need"
	apt-get update -qq
	# The package names are single words; the list splits on purpose.
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi

cd "$here/verify"
go vet ./...
go test -count=1 -timeout 30m "$@" ./...
