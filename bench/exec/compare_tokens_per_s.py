#!/usr/bin/env python3
"""Tokens/s of one process training gpt-tiny: Loom (`loom run`) against the same model in PyTorch,
on the same threads and the same token file, interleaved so both see the same machine load.
Prints nccl-tests-style columns, then the same data as JSON.

    /usr/bin/python3 bench/exec/compare_tokens_per_s.py --loom build/cli/loom \
        --gemm-bench build/bench/exec/exec_gemm_bench --threads 1 --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def make_tokens(loom, directory):
    text = os.path.join(directory, "text.txt")
    words = "the quick brown fox jumps over a lazy dog while loom plans parallel training on many ranks".split()
    state = 12345
    out = []
    while len(out) < 80000:
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(words[(state >> 33) % len(words)])
    with open(text, "w") as f:
        f.write(" ".join(out))
    tokens = os.path.join(directory, "tokens.bin")
    subprocess.run([loom, "data", "prepare", "--input", text, "--out", tokens], check=True, capture_output=True)
    return tokens


def run_loom(loom, tokens, args, directory):
    log = os.path.join(directory, "loom.jsonl")
    subprocess.run([loom, "run", "--model", "gpt-tiny", "--data", tokens, "--steps", str(args.steps),
                    "--global-batch", str(args.batch), "--micro-batch", str(args.batch), "--threads", str(args.threads),
                    "--log", log], check=True, capture_output=True)
    records = [json.loads(l) for l in open(log) if '"step"' in l][2:]
    return (statistics.median(r["step_time_s"] for r in records),
            statistics.median(r["tflops_per_gpu"] for r in records))


def gemm_peak_gflops(bench, threads):
    """The machine's measured fp32 GEMM rate (1024³, the backend's BLAS) from bench/exec's benchmark."""
    if not bench or not os.path.exists(bench):
        return None
    out = subprocess.run([bench, f"--benchmark_filter=backend/m:1024/n:1024/k:1024/threads:{threads}/",
                          "--benchmark_format=json", "--benchmark_min_time=0.3"], capture_output=True, text=True)
    try:
        return json.loads(out.stdout)["benchmarks"][0]["GFLOP/s"] / 1.0
    except (ValueError, KeyError, IndexError):
        return None


def run_torch(tokens, args):
    out = subprocess.run([sys.executable, os.path.join(HERE, "gpt_tiny_torch.py"), "--data", tokens, "--steps",
                          str(args.steps), "--batch", str(args.batch), "--threads", str(args.threads)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["median_step_time_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", default="build/cli/loom")
    ap.add_argument("--gemm-bench", default="build/bench/exec/exec_gemm_bench")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    env_threads = str(args.threads)
    os.environ.update({"OMP_NUM_THREADS": env_threads, "OPENBLAS_NUM_THREADS": env_threads})
    with tempfile.TemporaryDirectory() as d:
        tokens = make_tokens(args.loom, d)
        loom_times, loom_tflops, torch_times = [], [], []
        for _ in range(args.rounds):
            t, f = run_loom(args.loom, tokens, args, d)
            loom_times.append(t)
            loom_tflops.append(f)
            torch_times.append(run_torch(tokens, args))
    peak = gemm_peak_gflops(args.gemm_bench, args.threads)
    achieved_gflops = statistics.median(loom_tflops) * 1e3
    tokens_per_step = args.batch * 128
    loom_tps = tokens_per_step / statistics.median(loom_times)
    torch_tps = tokens_per_step / statistics.median(torch_times)
    print("# gpt-tiny training throughput, one process, median step time of each run, median over runs")
    print(f"# {'framework':>10} {'threads':>8} {'batch':>6} {'step_time':>10} {'tokens/s':>10} {'vs_torch':>9}")
    print(f"# {'':>10} {'':>8} {'seq':>6} {'(s)':>10} {'':>10} {'(x)':>9}")
    for name, t, tps in (("loom", statistics.median(loom_times), loom_tps),
                         ("pytorch", statistics.median(torch_times), torch_tps)):
        print(f"  {name:>10} {args.threads:>8} {args.batch:>6} {t:>10.4f} {tps:>10.0f} {tps / torch_tps:>9.2f}")
    if peak:
        print(f"# loom: {achieved_gflops:.1f} GFLOP/s of model FLOPs = {100 * achieved_gflops / peak:.0f} % of the "
              f"measured 1024^3 sgemm rate ({peak:.1f} GFLOP/s, {args.threads} thread(s))")
    print(json.dumps({"threads": args.threads, "batch": args.batch, "loom_tokens_per_s": loom_tps,
                      "loom_gflops": achieved_gflops, "gemm_peak_gflops": peak,
                      "pytorch_tokens_per_s": torch_tps, "speedup": loom_tps / torch_tps,
                      "loom_step_times_s": loom_times, "pytorch_step_times_s": torch_times}))


if __name__ == "__main__":
    main()
