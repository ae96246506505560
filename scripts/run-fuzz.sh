#!/usr/bin/env bash
# Fuzzes each libFuzzer target of tests/fuzz for SECONDS (default 30) from its seed corpus, under
# AddressSanitizer and UBSan: a crash, a sanitizer report, a leak, an input slower than 5 s or an
# uncaught exception fails. Inputs run in milliseconds; a 1 s limit failed on inputs that replay in
# 5 ms while the 2-core machine ran three builds, so 5 s: a hang still fails. Inputs the fuzzer finds
# go to a scratch corpus, not the repository; a failing input is kept as BUILD_DIR/fuzz-crash-<target>-*
# (copy it into tests/fuzz/corpus/<target>/ once fixed, so ctest replays it).
# Usage: scripts/run-fuzz.sh [SECONDS] [BUILD_DIR]
#   after: cmake --preset asan && cmake --build --preset asan -j2
set -euo pipefail
seconds=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${2:-$root/build-asan}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for target in "$build"/tests/fuzz/fuzz_*; do
  name=${target##*/fuzz_}
  mkdir -p "$work/$name"
  if (cd "$work" && "$target" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-crash-$name-" "$work/$name" "$root/tests/fuzz/corpus/$name") >"$work/$name.log" 2>&1; then
    runs=$(awk '/^stat::number_of_executed_units/ {print $2}' "$work/$name.log")
    echo "fuzz_$name: ${runs:-?} inputs in $seconds s, clean"
  else
    echo "fuzz_$name: FAILED"
    tail -n 60 "$work/$name.log"
    status=1
  fi
done
exit $status
