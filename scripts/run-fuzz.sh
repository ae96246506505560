#!/usr/bin/env bash
# Fuzzes each libFuzzer target of tests/fuzz for SECONDS (default 30) from its seed corpus, under
# AddressSanitizer and UBSan: a crash, a sanitizer report, a leak, an input slower than 5 s or an
# uncaught exception fails. Inputs run in milliseconds; a 1 s limit failed on inputs that replay in
# 5 ms while the 2-core machine ran three builds, so 5 s: a hang still fails. Inputs the fuzzer finds
# go to a scratch corpus, not the repository; a failing input is kept as BUILD_DIR/fuzz-crash-<target>-*
# (copy it into tests/fuzz/corpus/<target>/ once fixed, so ctest replays it).
# Targets run JOBS at a time (default: the machine's cores), each a single-threaded libFuzzer process
# with its own SECONDS, so each is fuzzed as long as when they ran one by one; the results print in
# target order once all have finished.
# Usage: scripts/run-fuzz.sh [SECONDS] [BUILD_DIR] [JOBS]
#   after: cmake --preset asan && cmake --build --preset asan -j2
set -euo pipefail
seconds=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${2:-$root/build-asan}" && pwd)
jobs=${3:-$(nproc)}
if [[ ! $seconds =~ ^[1-9][0-9]*$ || ! $jobs =~ ^[1-9][0-9]*$ ]]; then
  echo "run-fuzz.sh: SECONDS and JOBS must be positive integers (got '$seconds', '$jobs')" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One target, its log in $work/NAME.log and its exit status in $work/NAME.rc.
fuzz_one() {
  local target=$1 name=${1##*/fuzz_} rc=0
  mkdir -p "$work/$name"
  (cd "$work" && "$target" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-crash-$name-" "$work/$name" "$root/tests/fuzz/corpus/$name") \
    >"$work/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$name.rc"
}

targets=("$build"/tests/fuzz/fuzz_*)
if [ ! -x "${targets[0]}" ]; then
  echo "run-fuzz.sh: no fuzz targets in $build/tests/fuzz (build the asan preset first)" >&2
  exit 2
fi
running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
wait

status=0
for target in "${targets[@]}"; do
  name=${target##*/fuzz_}
  if [ "$(cat "$work/$name.rc" 2>/dev/null || echo missing)" = 0 ]; then
    runs=$(awk '/^stat::number_of_executed_units/ {print $2}' "$work/$name.log")
    echo "fuzz_$name: ${runs:-?} inputs in $seconds s, clean"
  else
    echo "fuzz_$name: FAILED"
    tail -n 60 "$work/$name.log"
    status=1
  fi
done
exit $status
