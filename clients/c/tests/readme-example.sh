#!/usr/bin/env bash
# Runs the C client's examples (built in DIR) against the lcd at $LC_ADDR,
# and checks that the README quotes the session example as it is: every
# line of the README's first C block is a line of examples/session_example.c.
#   tests/readme-example.sh DIR
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=$1
status=0
awk '/^```c$/ {n++; inside = n == 1; next} /^```$/ {inside = 0} inside' "$here/README.md" >"$dir/readme-block.c"
[ -s "$dir/readme-block.c" ] || { echo "readme-example: no C block in the README" >&2; status=1; }
while IFS= read -r line; do
	[ -z "${line// /}" ] && continue
	if ! grep -qxF -- "$line" "$here/examples/session_example.c"; then
		echo "readme-example: the README's line is not in examples/session_example.c: $line" >&2
		status=1
	fi
done <"$dir/readme-block.c"
if ! out=$("$dir/session_example" "$LC_ADDR" 2>&1); then
	echo "readme-example: session_example failed: $out" >&2
	status=1
elif ! grep -q "^holding orders/batch-7, token [0-9]*$" <<<"$out"; then
	echo "readme-example: session_example said: $out" >&2
	status=1
fi
if ! out=$("$dir/example" "$LC_ADDR" 2>&1); then
	echo "readme-example: example (v1) failed: $out" >&2
	status=1
fi
exit $status
