#!/usr/bin/env bash
# Checks that a README quotes its example as it is (every line of its first
# LANG block is a line of SOURCE), then runs the example BINARY against the
# lcd at $LC_ADDR: it must exit 0 and say "holding orders/batch-7, token N".
# The C and the C++ clients' session-conformance.sh run it.
#   tests/readme-example.sh README LANG SOURCE BINARY
set -uo pipefail
readme=$1 lang=$2 source=$3 binary=$4
status=0
block=$(awk -v fence="\`\`\`$lang" '$0 == fence {n++; inside = n == 1; next} /^```$/ {inside = 0} inside' "$readme")
[ -n "$block" ] || { echo "readme-example: no $lang block in $readme" >&2; status=1; }
while IFS= read -r line; do
	[ -z "${line// /}" ] && continue
	if ! grep -qxF -- "$line" "$source"; then
		echo "readme-example: $readme quotes a line that is not in $source: $line" >&2
		status=1
	fi
done <<<"$block"
if ! out=$("$binary" "$LC_ADDR" 2>&1); then
	echo "readme-example: $binary failed: $out" >&2
	status=1
elif ! grep -q "^holding orders/batch-7, token [0-9]*$" <<<"$out"; then
	echo "readme-example: $binary said: $out" >&2
	status=1
fi
exit $status
