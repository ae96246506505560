#!/usr/bin/env bash
# Issue 15's bar on a lent GPU machine, in one prepared call: measure the GPU into a cost file with
# `loom profile --backend cuda` (the GPU matrix's GEMM shapes, memory-bound ops, optimizer step and the
# sustained clock), then `loom validate --backend cuda` with that file as measured (no calibration): each
# configuration of the GPU matrix simulated and run for real, step time and peak memory side by side.
# Run from the repository root there with the bundle carried beside it (scripts/gpu-bundle.sh gpu-bundle build):
#   scripts/gpu-validate.sh gpu-bundle OUTDIR [SECONDS]
#   CONFIGS=a,b,...  only these configurations (default: all; 2-GPU layouts run where there are 2 GPUs)
#   PROFILE=FILE|PRESET  predict from this cost file or preset instead of profiling first (the measured
#                        step times do not depend on it: `loom validate` can re-predict them later)
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

profile=${PROFILE:-}
if [[ -z $profile ]]; then
  profile=$logs/profile.json
  t0=$(date +%s)
  timeout --kill-after=5 "$(( $(left) < 240 ? $(left) : 240 ))" "$run" loom profile --backend cuda \
    --out "$profile" >"$logs/profile.txt" 2>&1
  echo "profile: exit $? in $(($(date +%s) - t0)) s" >"$logs/summary.txt"
else
  echo "profile: $profile (given)" >"$logs/summary.txt"
fi

# The matrix one configuration a call, fastest first, each its own JSON: a configuration the budget cuts
# short costs only itself (a whole batch in one call lost every row to one cut, 2026-11-28).
configs="small-mb8,small-mb2-accum8,small-seq512-mb16,small-selective,small-full,350m-mb4,350m-full-mb16"
configs+=",1.3b-mb2,1.3b-mb1-accum8,1.3b-selective-mb4,1.3b-full-mb8,1.3b-seq1024-mb4"
configs+=",llama1b-mb2,llama1b-selective-mb4"
configs+=",small-flash-mb8,1.3b-flash-mb4,llama1b-flash-mb8,llama1b-op-mb8"
configs+=",350m-dp2-zero1,350m-tp2-sp,1.3b-pp2-1f1b-m16,1.3b-dp2-zero3"
IFS=, read -ra names <<<"${CONFIGS:-$configs}"
for name in "${names[@]}"; do
  t0=$(date +%s)
  ((($(left)) < 20)) && { echo "validate $name: skipped, budget spent" >>"$logs/summary.txt"; continue; }
  timeout --kill-after=5 "$(left)" "$run" loom validate --profile "$profile" --backend cuda --steps 8 \
    --warmup 3 --work-dir "$logs/matrix" --mpirun mpirun --configs "$name" --format json \
    >"$logs/validate-$name.json" 2>"$logs/validate-$name.stderr"
  echo "validate $name: exit $? in $(($(date +%s) - t0)) s" >>"$logs/summary.txt"
done
echo "total $(($(date +%s) - start)) s of $budget" >>"$logs/summary.txt"
# Every configuration's rows in one table, and the bars over all of them.
python3 - "$logs"/validate-*.json >"$logs/validate.txt" 2>&1 <<'TABLE'
import json, statistics, sys
rows, skipped, failed = [], [], []
for path in sys.argv[1:]:
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        print(f"# {path}: no JSON (cut short or did not start)")
        continue
    rows += d["rows"]; skipped += d.get("skipped", []); failed += d.get("failed", [])
print(f"{'config':22} {'workload':30} {'predicted':>10} {'measured':>10} {'error%':>7} {'pred_GiB':>9} {'meas_GiB':>9} {'mem%':>6}")
for r in rows:
    w = f"{r['model']} s{r['seq_len']} gb{r['global_batch']}" + (" flash" if r.get("attention") == "flash" else "")
    print(f"{r['name']:22} {w:30} {r['predicted_step_time_s']:10.4f} {r['measured_step_time_s']:10.4f} "
          f"{100 * r['step_time_error']:+7.2f} {r['predicted_peak_memory_gib']:9.2f} {r['measured_peak_memory_gib']:9.2f} "
          f"{100 * r['memory_error']:6.2f}")
for s in skipped: print(f"{s['name']:22} skipped: {s['reason']}")
for f in failed: print(f"{f['name']:22} failed: {f['error']}")
if rows:
    e = [abs(r["step_time_error"]) for r in rows]
    m = max(r["memory_error"] for r in rows)
    print(f"# {len(rows)} configurations: step time |error| median {100 * statistics.median(e):.2f} % (bar 5 %), "
          f"max {100 * max(e):.2f} % (bar 10 %); peak memory |error| max {100 * m:.2f} % (bar 5 %)")
TABLE

# Each run's stdout is large only on failure; the JSONL logs and stderr are what the table was read from.
tar -czf "$out/gpu-validate.tar.gz" -C "$out" gpu-validate
cp "$logs/validate.txt" "$out/validate.txt"
echo "=== machine"; cat "$logs/machine.txt"
echo "=== profile (head)"; head -12 "$logs/profile.txt" 2>/dev/null
echo "=== dry run against $preset"; cat "$logs/dry-run-preset.txt"
echo "=== validate"; cat "$logs/validate.txt"
cat "$logs"/validate-*.stderr 2>/dev/null | grep '^loom:' | head -20
# A run that failed: the end of its stderr.
for err in "$logs"/matrix/*.stderr; do
  [[ -s $err ]] || continue
  echo "=== $(basename "$err") (last 10 lines)"
  tail -n 10 "$err"
done
cat "$logs/summary.txt"
