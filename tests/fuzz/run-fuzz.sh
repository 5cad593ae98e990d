#!/usr/bin/env bash
# tests/fuzz/run-fuzz.sh — runs each named fuzz harness (build/fuzz/fuzz_NAME, built
# by `make fuzz`) for FUZZ_SECONDS seconds, one after the other, and writes
# build/fuzz/report.md: per harness executions, exec/s, coverage (cov/ft from
# libFuzzer's last status line), new corpus entries and crashes found.
#
# New corpus entries go to build/fuzz/corpus/NAME (the committed seeds in
# tests/fuzz/corpus/NAME and the regression inputs in tests/fuzz/regress/NAME
# are read, never written); crash, leak and timeout inputs to
# build/fuzz/artifacts/NAME-*; each run's log to build/fuzz/logs/NAME.log.
# Exit status 1 when a harness found something.
set -u
cd "$(dirname "$0")/../.."
secs=${FUZZ_SECONDS:-60}
out=build/fuzz
mkdir -p "$out/artifacts" "$out/logs"

# Longest input per harness (-max_len): a few KiB covers every format's
# structure; segment files and configs get more room.
max_len() {
  case $1 in
    log) echo 65536 ;;
    config) echo 8192 ;;
    batch) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

report=${FUZZ_REPORT:-$out/report.md}
{
  echo "# sluice fuzzing report"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), ${secs} s per harness, $(nproc) CPUs, $(clang --version | head -n1)"
  echo
  echo "| harness | executions | exec/s | cov | ft | corpus | new | crashes |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$report"

found=0
for name in "$@"; do
  bin=$out/fuzz_$name
  [[ -x $bin ]] || { echo "run-fuzz: $bin is missing (make fuzz-build)" >&2; exit 2; }
  corpus=$out/corpus/$name
  mkdir -p "$corpus"
  dirs=("$corpus" "tests/fuzz/corpus/$name")
  [[ -d tests/fuzz/regress/$name ]] && dirs+=("tests/fuzz/regress/$name")
  dict=()
  [[ -f tests/fuzz/$name.dict ]] && dict=(-dict="tests/fuzz/$name.dict")
  log=$out/logs/$name.log
  before=$(ls "$corpus" | wc -l)
  echo "run-fuzz: $name for ${secs} s"
  # -timeout: one input may take at most 25 s (a hang otherwise); the config loader's
  # instruction budget ends a hostile config well before. Leak detection is on.
  ASAN_OPTIONS=detect_leaks=1 \
    "$bin" -max_total_time="$secs" -max_len="$(max_len "$name")" -timeout=25 \
    -rss_limit_mb=2048 -detect_leaks=1 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$name-" "${dict[@]}" "${dirs[@]}" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -n1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$last")
  after=$(ls "$corpus" | wc -l)
  crashes=0
  if [[ $rc -ne 0 ]]; then
    crashes=1
    found=1
    echo "run-fuzz: $name FOUND SOMETHING (exit $rc); see $log and $out/artifacts/$name-*"
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*fuzz oracle failed|.*runtime error)' "$log" | head -n 5
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "${execs:-?}" "${eps:-?}" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$((after - before))" "$crashes" >>"$report"
done
echo
cat "$report"
exit $found
