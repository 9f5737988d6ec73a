# Sourced by the build scripts under deploy/: sets VERSION and COMMIT for
# the binaries, archives and image tags, unless the caller exported them.
#
#   VERSION  default: `git describe --tags --always --dirty`, else "dev"
#   COMMIT   default: the short hash of HEAD, else "none"
#
# The version ends up in file names and image tags, so it is limited to
# letters, digits, dot, dash and underscore. The caller sets root to the
# top of the tree first.

: "${root:?deploy/version.sh needs root set to the top of the tree}"

if [ -z "${VERSION:-}" ]; then
	VERSION=$(git -C "$root" describe --tags --always --dirty 2>/dev/null) || VERSION=dev
fi
if [ -z "${COMMIT:-}" ]; then
	COMMIT=$(git -C "$root" rev-parse --short HEAD 2>/dev/null) || COMMIT=none
fi
case $VERSION in
'' | [!A-Za-z0-9_]* | *[!A-Za-z0-9_.-]*)
	printf '%s: VERSION %s: use letters, digits, ".", "-" and "_", starting with a letter, digit or "_"\n' "${0##*/}" "$VERSION" >&2
	exit 2
	;;
esac
case $COMMIT in
'' | *[!A-Za-z0-9_.-]*)
	printf '%s: COMMIT %s: use letters, digits, ".", "-" and "_"\n' "${0##*/}" "$COMMIT" >&2
	exit 2
	;;
esac
