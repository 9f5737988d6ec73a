#!/bin/sh
# Tests of everything under deploy/ and of the top-level Dockerfile; the
# tests themselves are the Go module in deploy/verify.
#
# Usage: deploy/test.sh [go test flags...]     e.g. deploy/test.sh -run Kubernetes -v
#
# Installs the tools the tests call when they are missing, with apt-get:
# promtool (package prometheus), shellcheck, zip and systemd-analyze; and
# builds helm (below). LC_HELM=/path/to/helm uses that helm instead.
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

# helm, for the chart's tests (deploy/verify/helm_test.go): built once from
# its Go module into deploy/helm/tools/bin, which git ignores, and kept
# there with a stamp of its version; another version's is built again. Its
# module stays out of lcd's go.mod: go install of a version builds outside
# any module.
helm_version=v3.22.0
helm_bin="$here/helm/tools/bin"
if [ -z "${LC_HELM:-}" ]; then
	LC_HELM="$helm_bin/helm"
	if [ ! -x "$LC_HELM" ] || [ "$(cat "$helm_bin/helm.version" 2>/dev/null || true)" != "$helm_version" ]; then
		printf 'deploy/test.sh: building helm %s into %s (once)\n' "$helm_version" "$helm_bin"
		build_dir=$(mktemp -d)
		(cd "$build_dir" && GOFLAGS=-mod=mod GOBIN="$helm_bin" go install "helm.sh/helm/v3/cmd/helm@$helm_version")
		rmdir "$build_dir"
		echo "$helm_version" >"$helm_bin/helm.version"
	fi
fi
export LC_HELM

cd "$here/verify"
go vet ./...
go test -count=1 -timeout 30m "$@" ./...
