#!/usr/bin/env bash
# The simulator-vs-executor benchmark of issue 5: measure this machine (`loom profile` under
# mpirun), run the validation matrix against that profile, then close the loop once — trace two
# configurations, `loom calibrate` the profile to them, and run the matrix again with the result.
# Prints the 5 % / 10 % step-time bars and the 5 % memory bar for both profiles.
#
#   bench/validate/run_matrix.sh [LOOM_BINARY] [OUT_DIR]      (defaults: build-val/cli/loom, /tmp/loom-validate)
#   RANKS=N  ranks for the profile's collectives (default: 2, the matrix's largest layout)
#   STEPS=K WARMUP=W  steps per matrix run and steps dropped before the median (default 10, 3)
#   ROUNDS=R  interleaved rounds of the matrix, each configuration's fastest kept (default 5)
set -euo pipefail
LOOM=$(realpath "${1:-build-val/cli/loom}")
OUT=${2:-/tmp/loom-validate}
RANKS=${RANKS:-2}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-5}
MPIRUN=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"

echo "# host $(hostname), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo "# 1. profile: $MPIRUN --oversubscribe -np $RANKS $LOOM profile --backend cpu --out $OUT/profile.json"
"$MPIRUN" --oversubscribe -np "$RANKS" "$LOOM" profile --backend cpu --out "$OUT/profile.json" > "$OUT/profile.txt"
grep -A20 "α–β fits" "$OUT/profile.txt"
grep "memory_bound_efficiency" "$OUT/profile.txt"

echo "# 2. matrix against the measured profile"
"$LOOM" validate --profile "$OUT/profile.json" --steps "$STEPS" --warmup "$WARMUP" --rounds "$ROUNDS" --work-dir "$OUT/matrix" \
  --mpirun "$MPIRUN" | tee "$OUT/validate_profile.txt"

# 3. Calibrate on the traces of four configurations of the matrix, using the model and tokens
#    the matrix wrote: single-rank grad-accum-4 (micro-batch 2) and single (micro-batch 8), so the
#    GEMM scale fits small and large micro-batches; and, for the kernel timings taken with both
#    ranks running (a single-rank run cannot show how two ranks slow each other), dp2-zero0
#    (micro-batch 4) and pp2-gpipe-m8 (micro-batch 1, each rank its own stage). Each trace carries
#    its run's layout. Each is traced ROUNDS times, interleaved; calibrate keeps the fastest trace
#    of each run and rank. The other nine configurations are out of sample.
echo "# 3. calibrate on the traces of grad-accum-4, single, dp2-zero0 and pp2-gpipe-m8, then the matrix again"
TRACES=()
for ROUND in $(seq "$ROUNDS"); do
  for MB in 2 8; do
    TRACE="$OUT/calibration-mb$MB-round$ROUND.trace.json"
    "$MPIRUN" --oversubscribe -np 1 "$LOOM" run --model "$OUT/matrix/model.json" --cluster local-cpu --data "$OUT/matrix/tokens.bin" \
      --global-batch 8 --micro-batch "$MB" --steps "$STEPS" --threads 1 --trace "$TRACE" > /dev/null
    TRACES+=("$TRACE")
  done
  TRACE="$OUT/calibration-dp2-round$ROUND.trace.json"
  "$MPIRUN" --oversubscribe -np 2 "$LOOM" run --model "$OUT/matrix/model.json" --cluster local-cpu --data "$OUT/matrix/tokens.bin" \
    --global-batch 8 --micro-batch 4 --gpus 2 --dp 2 --steps "$STEPS" --threads 1 --trace "$TRACE" > /dev/null
  TRACES+=("${TRACE%.json}.rank0.json" "${TRACE%.json}.rank1.json")
  TRACE="$OUT/calibration-pp2-round$ROUND.trace.json"
  "$MPIRUN" --oversubscribe -np 2 "$LOOM" run --model "$OUT/matrix/model.json" --cluster local-cpu --data "$OUT/matrix/tokens.bin" \
    --global-batch 8 --micro-batch 1 --gpus 2 --pp 2 --schedule gpipe --steps "$STEPS" --threads 1 --trace "$TRACE" > /dev/null
  TRACES+=("${TRACE%.json}.rank0.json" "${TRACE%.json}.rank1.json")
done
"$LOOM" calibrate --cluster "$OUT/profile.json" --trace "${TRACES[@]}" --out "$OUT/calibrated.json"
"$LOOM" validate --profile "$OUT/calibrated.json" --steps "$STEPS" --warmup "$WARMUP" --rounds "$ROUNDS" --work-dir "$OUT/matrix-calibrated" \
  --mpirun "$MPIRUN" | tee "$OUT/validate_calibrated.txt"
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
