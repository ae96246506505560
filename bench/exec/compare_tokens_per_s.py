#!/usr/bin/env python3
"""Tokens/s of one process training a small GPT: Loom (`loom run`) against the same model in PyTorch
(bench/exec/gpt_torch.py), on the same threads and the same token file, over a sweep of sequence lengths,
micro-batches and thread counts. Each round runs every cell once, Loom and PyTorch back to back, so both
see the same machine load; a cell's figure is the median over rounds of each run's median step time.
Prints nccl-tests-style columns, then the same data as JSON (one object, "cells": [...]).

    /usr/bin/python3 bench/exec/compare_tokens_per_s.py --loom build/cli/loom \\
        --gemm-bench build/bench/exec/exec_gemm_bench --rounds 3

The default model is 4 layers, hidden 256, 4 heads, byte vocabulary (256), learned positions, tied
embeddings, GELU, LayerNorm, no dropout. --shapes SEQxBATCH,... and --threads 1,2 choose the cells.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SHAPES = "64x4,64x16,256x2,256x8,256x16,1024x2,1024x4"


def make_tokens(loom, directory):
    text = os.path.join(directory, "text.txt")
    words = "the quick brown fox jumps over a lazy dog while loom plans parallel training on many ranks".split()
    state = 12345
    out = []
    while len(out) < 200000:
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(words[(state >> 33) % len(words)])
    with open(text, "w") as f:
        f.write(" ".join(out))
    tokens = os.path.join(directory, "tokens.bin")
    subprocess.run([loom, "data", "prepare", "--input", text, "--out", tokens], check=True, capture_output=True)
    return tokens


OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def thread_env(threads, openmp_blas=False):
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)})
    if openmp_blas:  # Debian's libblas.so.3 of the OpenMP build of OpenBLAS, ahead of the alternatives' choice
        env["LD_LIBRARY_PATH"] = OPENMP_BLAS + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    return env


def run_loom(loom, model, tokens, cell, steps, directory):
    seq, batch, threads = cell
    log = os.path.join(directory, "loom.jsonl")
    subprocess.run([loom, "run", "--model", model, "--seq", str(seq), "--data", tokens, "--steps", str(steps),
                    "--global-batch", str(batch), "--micro-batch", str(batch), "--threads", str(threads),
                    "--dropout", "0", "--log", log], check=True, capture_output=True, env=thread_env(threads))
    records = [json.loads(l) for l in open(log) if '"step"' in l][2:]
    return (statistics.median(r["step_time_s"] for r in records),
            statistics.median(r["tflops_per_gpu"] for r in records))


def run_torch(tokens, args, cell):
    seq, batch, threads = cell
    out = subprocess.run([sys.executable, os.path.join(HERE, "gpt_torch.py"), "--data", tokens, "--steps",
                          str(args.steps), "--batch", str(batch), "--seq", str(seq), "--threads", str(threads),
                          "--layers", str(args.layers), "--hidden", str(args.hidden), "--heads", str(args.heads)],
                         check=True, capture_output=True, text=True, env=thread_env(threads, args.torch_openmp_blas))
    return json.loads(out.stdout)["median_step_time_s"]


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


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        seq, _, batch = item.partition("x")
        shapes.append((int(seq), int(batch)))
    return shapes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", default="build/cli/loom")
    ap.add_argument("--gemm-bench", default="build/bench/exec/exec_gemm_bench")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="SEQxBATCH,... (batch = sequences per step)")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--torch-openmp-blas", action="store_true",
                    help="run PyTorch on the OpenMP build of OpenBLAS (libopenblas0-openmp) instead of the pthreads "
                         "build Debian's alternatives pick: one thread pool, as Loom links")
    args = ap.parse_args()
    shapes = parse_shapes(args.shapes)
    thread_counts = [int(t) for t in args.threads.split(",")]
    cells = [(seq, batch, t) for seq, batch in shapes for t in thread_counts]
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "model.json")
        with open(model, "w") as f:
            json.dump({"name": f"gpt-{args.layers}x{args.hidden}", "layers": args.layers, "hidden": args.hidden,
                       "heads": args.heads, "vocab": 256, "seq_len": max(s for s, _ in shapes),
                       "activation": "gelu", "norm": "layernorm", "tied_embeddings": True}, f)
        tokens = make_tokens(args.loom, d)
        loom_times = {c: [] for c in cells}
        loom_tflops = {c: [] for c in cells}
        torch_times = {c: [] for c in cells}
        for _ in range(args.rounds):
            for c in cells:
                t, f = run_loom(args.loom, model, tokens, c, args.steps, d)
                loom_times[c].append(t)
                loom_tflops[c].append(f)
                torch_times[c].append(run_torch(tokens, args, c))
    peaks = {t: gemm_peak_gflops(args.gemm_bench, t) for t in thread_counts}
    print(f"# {args.layers} layers, hidden {args.hidden}, {args.heads} heads, vocab 256: training tokens/s, one "
          f"process, median step of each run, median over {args.rounds} round(s)")
    print(f"# pytorch: {'OpenMP' if args.torch_openmp_blas else 'pthreads (Debian default)'} build of OpenBLAS")
    print(f"# {'seq':>6} {'batch':>6} {'threads':>8} {'loom_step':>10} {'torch_step':>10} {'loom_tok/s':>11} "
          f"{'torch_tok/s':>11} {'loom/torch':>10} {'loom_GF/s':>10} {'%_sgemm':>8}")
    rows = []
    for c in cells:
        seq, batch, threads = c
        lt, tt = statistics.median(loom_times[c]), statistics.median(torch_times[c])
        gflops = statistics.median(loom_tflops[c]) * 1e3
        peak = peaks.get(threads)
        rows.append({"seq": seq, "batch": batch, "threads": threads, "loom_step_s": lt, "torch_step_s": tt,
                     "loom_tokens_per_s": batch * seq / lt, "torch_tokens_per_s": batch * seq / tt,
                     "speedup": tt / lt, "loom_gflops": gflops, "sgemm_gflops": peak,
                     "loom_step_times_s": loom_times[c], "torch_step_times_s": torch_times[c]})
        share = f"{100 * gflops / peak:>8.0f}" if peak else f"{'-':>8}"
        print(f"  {seq:>6} {batch:>6} {threads:>8} {lt:>10.4f} {tt:>10.4f} {batch * seq / lt:>11.0f} "
              f"{batch * seq / tt:>11.0f} {tt / lt:>10.2f} {gflops:>10.1f} {share}")
    speedups = [r["speedup"] for r in rows]
    print(f"# loom/torch: min {min(speedups):.2f}x, median {statistics.median(speedups):.2f}x; "
          f"cells >= 1.0x: {sum(s >= 1.0 for s in speedups)}/{len(rows)}, >= 1.5x: "
          f"{sum(s >= 1.5 for s in speedups)}/{len(rows)}")
    for t, p in peaks.items():
        if p:
            print(f"# measured 1024^3 sgemm rate, {t} thread(s): {p:.1f} GFLOP/s (%_sgemm is model FLOPs over it)")
    print(json.dumps({"model": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "vocab": 256},
                      "rounds": args.rounds, "torch_openmp_blas": args.torch_openmp_blas, "cells": rows}))


if __name__ == "__main__":
    main()
