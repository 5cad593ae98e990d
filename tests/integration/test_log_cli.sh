#!/usr/bin/env bash
# tests/integration/test_log_cli.sh — drives the real bin/sluice log tools on
# real files: append, dump, verify catching damage, recover repairing it.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=./bin/sluice
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

p=$tmp/p0
last=$(seq 0 49999 | sed 's/.*/{"n":&}/' | $bin log append "$p" --compression zstd --sync \
       --segment-bytes 65536)
[[ $last == 49999 ]] || fail "append printed '$last', want 49999"
nseg=$(ls "$p"/*.log | wc -l)
((nseg >= 3)) || fail "expected several segments with --segment-bytes 65536, got $nseg"
for f in "$p"/*.log; do
  [[ $(basename "$f") =~ ^[0-9]{20}\.log$ ]] || fail "bad segment name $f"
done
$bin log verify "$p" | grep '^ok$' >/dev/null || fail "verify of a clean log"

# dump shows batch headers and exactly the asked records
out=$($bin log dump "$p" --from 12345 --max 2)
grep -q 'offset=12345 .*value={"n":12345}' <<<"$out" || fail "dump --from 12345"
grep -q 'offset=12346 ' <<<"$out" || fail "dump shows the second record"
grep -q 'offset=12347 ' <<<"$out" && fail "dump --max 2 showed a third record"
grep -q '^batch offsets=.* codec=zstd' <<<"$out" || fail "dump shows the batch header"

# appending again continues the offsets
last=$(echo '{"n":50000}' | $bin log append "$p" --lane feature-x)
[[ $last == 50000 ]] || fail "second append printed '$last', want 50000"
$bin log dump "$p" --from 50000 --lane feature-x | grep 'lane=feature-x value={"n":50000}' >/dev/null \
  || fail "lane dump"
[[ -z $($bin log dump "$p" --from 50000 --lane "" | grep 'offset=') ]] \
  || fail "base-lane dump shows a lane record"

# a flipped byte in the middle of the last segment: verify names it, recover cuts there
seg=$(ls "$p"/*.log | tail -n1)
size=$(stat -c %s "$seg")
mid=$((size / 2))
byte=$(dd if="$seg" bs=1 skip=$mid count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
printf "$(printf '\\%03o' $(( byte ^ 0x5a )))" | dd of="$seg" bs=1 seek=$mid conv=notrunc 2>/dev/null
if out=$($bin log verify "$p"); then fail "verify missed a flipped byte"; fi
grep -q "damaged: .*$(basename "$seg"): byte [0-9]*:" <<<"$out" || fail "verify output: $out"
bad=$(sed -n 's/.*: byte \([0-9]*\):.*/\1/p' <<<"$out")
((bad <= mid)) || fail "reported byte $bad is after the flip at $mid"
out=$($bin log recover "$p")
grep -q "truncated" <<<"$out" || fail "recover did not say what it did: $out"
[[ $(stat -c %s "$seg") == "$bad" ]] || fail "recover cut at $(stat -c %s "$seg"), want $bad"
$bin log verify "$p" | grep '^ok$' >/dev/null || fail "verify after recover"

# a torn tail
printf 'garbage-torn-write' >>"$seg"
$bin log verify "$p" >/dev/null && fail "verify missed a torn tail"
$bin log recover "$p" >/dev/null
$bin log verify "$p" >/dev/null || fail "recover did not repair a torn tail"

# lost indexes are rebuilt on open
rm -f "$p"/*.index "$p"/*.timeindex "$p"/*.lanes
$bin log dump "$p" --from 100 --max 1 2>"$tmp/err" | grep 'value={"n":100}' >/dev/null \
  || fail "dump after deleting indexes"
grep -q 'rebuilt' "$tmp/err" || fail "rebuild not reported on stderr"
$bin log verify "$p" >/dev/null || fail "verify after index rebuild"

# errors are clear and exit non-zero
$bin log dump "$tmp/nope" 2>"$tmp/err" && fail "dump of a missing dir succeeded"
grep -q "nope" "$tmp/err" || fail "missing-dir error does not name it"
set +e
$bin log append "$p" --compression lz4 </dev/null 2>/dev/null; [[ $? == 2 ]] || fail "bad codec exit"
$bin log frobnicate "$p" 2>/dev/null; [[ $? == 2 ]] || fail "unknown command exit"
$bin log verify "$tmp/nope" >/dev/null 2>&1; [[ $? == 1 ]] || fail "verify missing dir exit"
set -e
echo "log cli: ok"
