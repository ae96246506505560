#!/usr/bin/env bash
# The GPU checks of issues 14 and 15 in one prepared run, for a lent GPU machine's single call: run from
# the repository root there with the bundle carried beside it (scripts/gpu-bundle.sh gpu-bundle build),
#   scripts/gpu-check.sh gpu-bundle OUTDIR [SECONDS]
#   SKIP="torch_gpt2 layouts_cuda"  steps left out (a lease that splits the checks over two calls)
# Each step is time-boxed so the whole stays inside SECONDS (default 540, under the device tool's
# 10-minute command limit) and writes its log into OUTDIR (the device tool's $OUT), most important
# first: the GPU op and training suites (every kernel against the CPU reference), the NCCL communicator
# (every operation against MPI's, and its watchdog), a GPT-2-small training run for tokens/s (unfused and
# flash attention) beside the same model in PyTorch (bench/gpu/gpt2_torch.py, eager and torch.compile),
# `loom profile --backend cuda` with one rank and with two sharing the GPU, and the layout suite on the
# GPU with several ranks sharing it (messages staged through host memory). The logs come back as
# OUTDIR/gpu-check.tar.gz (the device tool returns at most 8 files) with OUTDIR/summary.txt beside it,
# every step's exit status and time; the end of the output holds the tail of each failed step. The
# figures go into docs/gpu-validation.md with the date, GPU and command.
set -uo pipefail

[[ $# -ge 2 ]] || { echo "usage: $0 BUNDLE OUTDIR [SECONDS]" >&2; exit 2; }
bundle=$(cd "$1" && pwd)
out=$2
budget=${3:-540}
logs=$out/gpu-check
mkdir -p "$logs"
run=$bundle/run.sh
start=$(date +%s)
summary=$logs/summary.txt
: >"$summary"

# step NAME SECONDS COMMAND...: runs COMMAND with its output in OUTDIR/NAME.log, killed after SECONDS
# (or what is left of the budget, less a margin for the steps after it to report).
step() {
  local name=$1 limit=$2
  shift 2
  if [[ " ${SKIP:-} " == *" $name "* ]]; then
    echo "$name: skipped (SKIP)" >>"$summary"
    return
  fi
  local left=$((budget - ($(date +%s) - start) - 10))
  ((limit > left)) && limit=$left
  if ((limit < 5)); then
    echo "$name: skipped, budget spent" >>"$summary"
    return
  fi
  local t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $(($(date +%s) - t0)) s (limit $limit s)" >>"$summary"
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1
  "$run" loom --version 2>&1
  "$run" ldd "$bundle/bin/loom" 2>&1 | grep -E 'libnccl|libcudart|libcublas' || echo "ldd: no CUDA libraries found"
} >"$logs/machine.txt"

step kernels_gpu 60 "$run" loom_kernels_gpu_test
step cuda_backend 90 "$run" exec_cuda_backend_test
# The NCCL communicator (issue 15): every operation against MPI's, one rank per GPU under the bundled mpirun
# (a world of one on a one-GPU machine), and the watchdog ending an all-reduce held behind the compute stream.
step nccl_comm 60 env NCCL_DEBUG=WARN "$run" exec_nccl_comm_test  # NCCL says why, should init fail
# GPT-2 small (12 x 768, seq 1024), bf16, one GPU: tokens/s and MFU from the run log.
data=$(mktemp -d)
head -c 3000000 README.md docs/*.md exec/README.md 2>/dev/null >"$data/text.txt"
"$run" loom data prepare --input "$data/text.txt" --out "$data/tokens.bin" >"$logs/data.log" 2>&1
step gpt2_small 60 "$run" loom run --model gpt2-small --backend cuda --data "$data/tokens.bin" --steps 30 \
  --global-batch 16 --micro-batch 8 --seq 1024 --log "$logs/gpt2-small.jsonl"
# The same with the fused attention (kernels/flash_attention.cu), and with its blocks through shared-memory
# tiles instead of registers (the two ways of kernels/flash_attention.cu, timed apart).
step gpt2_small_flash 60 "$run" loom run --model gpt2-small --backend cuda --data "$data/tokens.bin" --steps 30 \
  --global-batch 16 --micro-batch 8 --seq 1024 --attention flash --log "$logs/gpt2-small-flash.jsonl"
step gpt2_small_flash_smem_tiles 40 env LOOM_FLASH_SMEM_TILES=1 "$run" loom run --model gpt2-small --backend cuda \
  --data "$data/tokens.bin" --steps 10 --global-batch 16 --micro-batch 8 --seq 1024 --attention flash \
  --log "$logs/gpt2-small-flash-smem-tiles.jsonl"
# Four steps traced: each op's time on the GPU (CUDA events), totalled per step by name, largest first.
step gpt2_trace 60 "$run" loom run --model gpt2-small --backend cuda --data "$data/tokens.bin" --steps 4 \
  --global-batch 16 --micro-batch 8 --seq 1024 --trace "$logs/gpt2-small-trace.json"
# The same with flash attention: what is left around the fused attention.
step gpt2_trace_flash 60 "$run" loom run --model gpt2-small --backend cuda --data "$data/tokens.bin" --steps 4 \
  --global-batch 16 --micro-batch 8 --seq 1024 --attention flash --trace "$logs/gpt2-small-flash-trace.json"
for trace in gpt2-small gpt2-small-flash; do
python3 - "$logs/$trace-trace.json" 4 >"$logs/$trace-ops.txt" 2>&1 <<'OPS'
import collections, json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
steps = int(sys.argv[2])
for category in ("op", "compute"):
    total, count = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("cat") == category:
            total[e["name"]] += e["dur"]
            count[e["name"]] += 1
    print(f"# {category} slices: ms per step, calls per step")
    for name, us in total.most_common(30):
        print(f"{name:32s} {us / 1e3 / steps:9.3f} {count[name] // steps:6d}")
OPS
done
# The same model and batch in PyTorch on the same GPU (eager and torch.compile): issue 14's peer figures.
if python3 -c 'import torch' 2>/dev/null; then
  step torch_gpt2 120 python3 bench/gpu/gpt2_torch.py --steps 30 --global-batch 16 --micro-batch 8
fi
# Issue 14's 1.3B check (its cost file, its measured step beside `loom sim`'s) is a row of the GPU
# validation matrix, 1.3b-mb2: scripts/gpu-validate.sh.
step profile_cuda 60 "$run" loom profile --backend cuda --quick --out "$logs/profile-cuda.json"
# Two ranks on the one GPU: --comm direct refused in one line (the ranks are counted on a GPU by its UUID).
step nccl_shared_gpu 30 "$run" exec_staged_comm_test --gtest_filter='StagedComm.DirectCuda*'
# Two ranks on the one GPU: the kernels are profiled, the collectives are not (NCCL needs a GPU per rank);
# the table says why instead of handing MPI device memory.
step profile_cuda_shared 60 "$run" mpirun --oversubscribe -np 2 loom profile --backend cuda --quick \
  --out "$logs/profile-cuda-2ranks.json"
# Several ranks on the one GPU: the layout suite with LOOM_LAYOUT_BACKEND=cuda (host-staged messages). Its
# 127 layouts (each a few mpirun launches' CUDA start-up) run as 4 gtest shards at once on the machine's
# 16 cores, each shard in its own scratch directory (tests/exec/run_util.cc), its log layouts_cuda_K.log.
export run logs
step layouts_cuda 180 bash -c 'pids=(); for k in 0 1 2 3; do
    GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$k LOOM_LAYOUT_BACKEND=cuda LOOM_LAYOUT_COMM=host-staged \
      "$run" exec_layout_test >"$logs/layouts_cuda_$k.log" 2>&1 & pids+=($!); done
  rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
  grep -h -E "^\[  (PASSED|FAILED)  \]" "$logs"/layouts_cuda_*.log; exit $rc'
rm -rf "$data"
echo "total $(($(date +%s) - start)) s of $budget" >>"$summary"
# The device tool brings back at most 8 files: the logs travel as one archive, the summary beside it.
tar -czf "$out/gpu-check.tar.gz" -C "$out" gpu-check
cp "$summary" "$out/summary.txt"
# The tail of every step that failed, for a reader who sees only the end of the output.
for log in "$logs"/*.log; do
  name=$(basename "$log" .log)
  grep -q "^$name: exit 0 " "$summary" && continue
  echo "=== $name (last 25 lines)"
  tail -n 25 "$log"
done
# The figures, for a reader who sees only the end of the output.
{
  echo "=== figures"
  grep '^step' "$logs/gpt2_small.log" 2>/dev/null | tail -1
  grep '^step' "$logs/gpt2_small_flash.log" 2>/dev/null | tail -1
  grep '^step' "$logs/gpt2_small_flash_smem_tiles.log" 2>/dev/null | tail -1
  grep -A3 '^mode' "$logs/torch_gpt2.log" 2>/dev/null
  head -22 "$logs/gpt2-small-ops.txt" 2>/dev/null
  head -22 "$logs/gpt2-small-flash-ops.txt" 2>/dev/null
} | cut -c1-200
rm -rf "$logs"
cat "$out/summary.txt"
