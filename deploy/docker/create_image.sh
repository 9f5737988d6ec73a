#!/bin/sh
# Builds the Locking-Center container image from the top-level Dockerfile.
#
# Usage: deploy/docker/create_image.sh [--push]
#
# Without --push the image is built for this machine's platform and loaded
# into the local engine, tagged <IMAGE_NAME>:<version> and
# <IMAGE_NAME>:<IMAGE_TAG>. With --push it is built for every platform in
# PLATFORMS with buildx and pushed under both tags; that needs a buildx
# builder able to build several platforms (`docker buildx create --use`).
#
# Environment:
#   IMAGE_NAME  repository to tag   (default: locking-center/locking-center)
#   IMAGE_TAG   tag next to the version (default: latest)
#   PLATFORMS   targets of --push   (default: linux/amd64,linux/arm64)
#   VERSION     version tag and stamp (default: git describe, see deploy/version.sh)
#   COMMIT      commit stamp        (default: short hash of HEAD)
#   DOCKER      container engine command (default: docker)
set -eu

die() {
	printf 'create_image: %s\n' "$*" >&2
	exit 1
}

usage() {
	sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

push=no
for arg in "$@"; do
	case $arg in
	--push) push=yes ;;
	-h | --help)
		usage
		exit 0
		;;
	*) die "unknown argument $arg (see --help)" ;;
	esac
done

here=$(cd "$(dirname "$0")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
# shellcheck source=deploy/version.sh
. "$root/deploy/version.sh"
IMAGE_NAME=${IMAGE_NAME:-locking-center/locking-center}
IMAGE_TAG=${IMAGE_TAG:-latest}
PLATFORMS=${PLATFORMS:-linux/amd64,linux/arm64}
DOCKER=${DOCKER:-docker}
[ -n "$IMAGE_NAME" ] || die "IMAGE_NAME is empty"
[ -n "$IMAGE_TAG" ] || die "IMAGE_TAG is empty"
command -v "$DOCKER" >/dev/null 2>&1 || die "$DOCKER is needed and was not found in PATH"

set -- --file "$root/Dockerfile" \
	--build-arg "VERSION=$VERSION" --build-arg "COMMIT=$COMMIT" \
	--tag "$IMAGE_NAME:$VERSION"
if [ "$IMAGE_TAG" != "$VERSION" ]; then
	set -- "$@" --tag "$IMAGE_NAME:$IMAGE_TAG"
fi
if [ "$push" = yes ]; then
	[ -n "$PLATFORMS" ] || die "PLATFORMS is empty"
	"$DOCKER" buildx build --platform "$PLATFORMS" --push "$@" "$root"
	printf 'pushed %s:%s and %s:%s for %s\n' "$IMAGE_NAME" "$VERSION" "$IMAGE_NAME" "$IMAGE_TAG" "$PLATFORMS"
else
	"$DOCKER" build "$@" "$root"
	printf 'built %s:%s and %s:%s\n' "$IMAGE_NAME" "$VERSION" "$IMAGE_NAME" "$IMAGE_TAG"
fi
