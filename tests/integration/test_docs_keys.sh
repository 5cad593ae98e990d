#!/bin/sh
# The key reference in docs/config.md is the output of `sluice check --keys`
# (the checker's own tables): fail when they drift apart.
set -eu
cd "$(dirname "$0")/../.."
want=$(mktemp)
got=$(mktemp)
trap 'rm -f "$want" "$got"' EXIT
bin/sluice check --keys | sed "1{/^$/d}" > "$want"
sed -n '/<!-- keys:begin -->/,/<!-- keys:end -->/p' docs/config.md | sed '1d;$d' > "$got"
if ! diff -u "$got" "$want"; then
    echo "FAIL: docs/config.md's key reference differs from 'sluice check --keys' (paste its output between the markers)"
    exit 1
fi
echo "ok: docs/config.md key reference matches sluice check --keys"
