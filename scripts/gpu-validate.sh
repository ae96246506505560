#!/usr/bin/env bash
# Issue 15's bar on a lent GPU machine, in one prepared call: measure the GPU into a cost file with
# `loom profile --backend cuda` (the GPU matrix's GEMM shapes, memory-bound ops, optimizer step and the
# sustained clock), then `loom validate --backend cuda` with that file as measured (no calibration): each
# configuration of the GPU matrix simulated and run for real, step time and peak memory side by side.
# Run from the repository root there with the bundle carried beside it (scripts/gpu-bundle.sh gpu-bundle build):
#   scripts/gpu-validate.sh gpu-bundle OUTDIR [SECONDS]
#   CONFIGS=a,b,...  only these configurations (default: all; 2-GPU layouts run where there are 2 GPUs)
# Writes OUTDIR/gpu-validate.tar.gz (the cost file, the tables, every run's log) and OUTDIR/validate.txt;
# the output ends with both tables. The figures go into docs/gpu-validation.md with the date, GPU and command.
set -uo pipefail

[[ $# -ge 2 ]] || { echo "usage: $0 BUNDLE OUTDIR [SECONDS]" >&2; exit 2; }
bundle=$(cd "$1" && pwd)
out=$2
budget=${3:-540}
logs=$out/gpu-validate
mkdir -p "$logs"
run=$bundle/run.sh
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start) - 15)); }

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1
  "$run" loom --version 2>&1
} >"$logs/machine.txt"

# What the matrix will run and what the GPU's datasheet preset predicts for it.
preset=dgx-h100
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200 && preset=dgx-h200
"$run" loom validate --profile "$preset" --backend cuda --dry-run ${CONFIGS:+--configs "$CONFIGS"} \
  >"$logs/dry-run-preset.txt" 2>&1

t0=$(date +%s)
timeout --kill-after=5 "$(( $(left) < 240 ? $(left) : 240 ))" "$run" loom profile --backend cuda \
  --out "$logs/profile.json" >"$logs/profile.txt" 2>&1
echo "profile: exit $? in $(($(date +%s) - t0)) s" >"$logs/summary.txt"

t0=$(date +%s)
timeout --kill-after=5 "$(left)" "$run" loom validate --profile "$logs/profile.json" --backend cuda --steps 8 \
  --warmup 3 --work-dir "$logs/matrix" --mpirun mpirun ${CONFIGS:+--configs "$CONFIGS"} >"$logs/validate.txt" 2>&1
echo "validate: exit $? in $(($(date +%s) - t0)) s" >>"$logs/summary.txt"
echo "total $(($(date +%s) - start)) s of $budget" >>"$logs/summary.txt"

# Each run's stdout is large only on failure; the JSONL logs and stderr are what the table was read from.
tar -czf "$out/gpu-validate.tar.gz" -C "$out" gpu-validate
cp "$logs/validate.txt" "$out/validate.txt"
echo "=== machine"; cat "$logs/machine.txt"
echo "=== profile (head)"; head -12 "$logs/profile.txt"
echo "=== dry run against $preset"; cat "$logs/dry-run-preset.txt"
echo "=== validate"; cat "$logs/validate.txt"
# A run that failed: the end of its stderr.
for err in "$logs"/matrix/*.stderr; do
  [[ -s $err ]] || continue
  echo "=== $(basename "$err") (last 10 lines)"
  tail -n 10 "$err"
done
cat "$logs/summary.txt"
