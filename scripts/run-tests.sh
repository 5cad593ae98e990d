#!/usr/bin/env bash
# scripts/run-tests.sh — runs every cmocka test binary in the given build
# directories, then the integration scripts in tests/integration/, and ends
# with one summary line "N passed, N failed" (exit 1 when anything failed).
#
# A binary that dies without cmocka's summary (a sanitizer report, a crash)
# counts as one failed test, and its output is shown.
set -u
cd "$(dirname "$0")/.."
passed=0 failed=0 failed_names=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for dir in "$@"; do
  for t in "$dir"/test_*; do
    [[ -x $t && ! $t =~ \.(o|d)$ ]] || continue
    name="${t#build/}"
    start=$(date +%s)
    "$t" >"$log" 2>&1
    rc=$?
    grep -E '^\[  (FAILED|  ERROR)|^\[  ERROR|^(ERROR|==[0-9]+==)|error:|Failure!' "$log" | head -n 20
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n1)
    p=${p:-0} f=${f:-0}
    if [[ $rc -ne 0 && $f -eq 0 ]]; then
      f=1
      echo "---- $name exited with $rc; last output:"; tail -n 40 "$log"
    elif ((f)); then # the failing test's own report and the server log it printed
      echo "---- $name: $f failed; its output around the first failure:"
      grep -n -m1 -B 20 -A 100 -E '^\[  (FAILED|  ERROR)|^ERROR' "$log" | tail -n 120
    fi
    passed=$((passed + p)); failed=$((failed + f))
    ((f)) && failed_names+=("$name")
    printf '%-40s %3d passed %3d failed  (%ds)\n' "$name" "$p" "$f" $(( $(date +%s) - start ))
  done
done

if [[ -z ${SLUICE_UNIT_ONLY:-} ]]; then
  for t in tests/integration/test_*.sh; do
    [[ -x $t ]] || continue
    start=$(date +%s)
    if "$t" >"$log" 2>&1; then
      passed=$((passed + 1)); r=ok
    else
      failed=$((failed + 1)); r=FAILED; failed_names+=("$t")
      echo "---- $t failed; last output:"; tail -n 40 "$log"
    fi
    printf '%-40s %s  (%ds)\n' "$t" "$r" $(( $(date +%s) - start ))
  done
fi

((failed)) && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
