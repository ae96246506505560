#!/usr/bin/env python3
"""Time the linear layers' GEMMs in bf16 and in FP8 with tensorwise and rowwise scaling on this GPU,
for the cost file's gemm_fp8_max_efficiency and gemm_fp8_rowwise_max_efficiency.

FP8 GEMMs run as torchao's float8 training runs them, through torch._scaled_mm with E4M3 operands and a
bf16 output: tensorwise scaling passes one fp32 scale per operand (cuBLASLt's FP8 GEMM); rowwise
scaling passes one scale per row of the left operand and one per column of the right (PyTorch's
CUTLASS rowwise kernel), as torchao's "rowwise" recipe does for all three GEMMs of a linear layer.
Each is timed with and without fast accumulation (torchao uses it for the forward GEMM only).

Shapes: the four linear layers of Llama 3 8B and 70B (q/k/v fused, output, SwiGLU gate and up fused,
down) for the token counts of torchtitan's published runs (tokens × out × in: the forward GEMM of a TP
rank, its column or row share of the weight), and a square sweep. Operands are cycled through copies
that keep repeats out of L2 (megatron_layer_ops.copies), and the GPU's sustained / burst rate for both
precisions is measured in the same run (the cost files hold sustained figures).

  python3 bench/gpu/fp8_gemm.py --out fp8.json
"""
import argparse
import json
import statistics

import torch

from megatron_layer_ops import burst_and_sustained, copies, rand, timed

E4M3 = torch.float8_e4m3fn
MODELS = {  # hidden, query heads, kv heads, head dim, ffn
    "llama3-8b": (4096, 32, 8, 128, 14336),
    "llama3-70b": (8192, 64, 8, 128, 28672),
}
RUNS = [  # (model, tp, tokens per micro-batch on one GPU's GEMMs)
    ("llama3-8b", 1, 2 * 8192), ("llama3-8b", 8, 12 * 8192), ("llama3-70b", 8, 16 * 8192),
]


def linears(model, tp):
    h, heads, kv, d, ffn = MODELS[model]
    return [("qkv", (heads + 2 * kv) * d // tp, h), ("out", h, heads * d // tp), ("gate_up", 2 * ffn // tp, h),
            ("down", h, ffn // tp)]


def fp8_operands(m, n, k):
    a = rand(m, k).to(E4M3)
    b = rand(n, k).to(E4M3).t()  # column-major (k × n), as _scaled_mm takes its right operand
    return a, b


def time_shape(m, n, k, reps):
    """Milliseconds of each kind of GEMM for an (m × k) · (k × n) product, bf16 output."""
    out = {}
    sets = copies(lambda: (rand(m, k), rand(k, n)), (m * k + k * n) * 2)
    out["bf16"] = timed(lambda a, b: a @ b, sets, reps)
    fp8_sets = copies(lambda: fp8_operands(m, n, k), m * k + k * n)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    rows, cols = torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda")
    for name, sa, sb in (("tensorwise", one, one), ("rowwise", rows, cols)):
        for fast in (False, True):
            key = f"fp8_{name}{'_fast' if fast else ''}"
            try:
                out[key] = timed(lambda a, b: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                                               use_fast_accum=fast), fp8_sets, reps)
            except RuntimeError as e:
                out[key] = None
                print(f"# {key} unavailable for {m}x{n}x{k}: {str(e).splitlines()[0][:80]}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--peak", type=float, default=989.4e12, help="dense bf16 peak (H100/H200 SXM)")
    ap.add_argument("--peak-fp8", type=float, default=1979e12, help="dense FP8 peak (H100/H200 SXM)")
    ap.add_argument("--sustain-s", type=float, default=15.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    shapes = [(f"{model}-tp{tp}-{name}", tokens, n, k, False) for model, tp, tokens in RUNS
              for name, n, k in linears(model, tp)]
    shapes += [(f"square-{s}", s, s, s, True) for s in (2048, 4096, 8192, 16384)]
    rows = []
    print(f"{'shape':>26} {'m':>7} {'n':>6} {'k':>6} {'bf16':>6} {'tensor':>6} {'t-fast':>6} {'row':>6} {'r-fast':>6}"
          "  (fraction of each precision's peak)")
    for name, m, n, k, square in shapes:
        ms = time_shape(m, n, k, a.reps)
        flops = 2.0 * m * n * k
        eff = {kind: (flops / (t * 1e-3) / (a.peak if kind == "bf16" else a.peak_fp8) if t else None)
               for kind, t in ms.items()}
        rows.append({"shape": name, "m": m, "n": n, "k": k, "ms": ms, "efficiency": eff, "square": square})
        cells = " ".join(f"{eff[kind]:6.3f}" if eff[kind] else "     -"
                         for kind in ("bf16", "fp8_tensorwise", "fp8_tensorwise_fast", "fp8_rowwise", "fp8_rowwise_fast"))
        print(f"{name:>26} {m:7d} {n:6d} {k:6d} {cells}")
    one = torch.ones((), device="cuda", dtype=torch.float32)

    def bf16_gemm():
        x, y = rand(8192, 8192), rand(8192, 8192)
        return lambda: x @ y

    def fp8_gemm():
        x, y = fp8_operands(8192, 8192, 8192)
        return lambda: torch._scaled_mm(x, y, one, one, out_dtype=torch.bfloat16)
    bf16_burst, bf16_sustained = burst_and_sustained(bf16_gemm, a.sustain_s)
    fp8_burst, fp8_sustained = burst_and_sustained(fp8_gemm, a.sustain_s)
    bf16_ratio, fp8_ratio = bf16_sustained / bf16_burst, fp8_sustained / fp8_burst
    model_rows = [r for r in rows if not r["square"]]
    summary = {"sustained_over_burst_bf16": bf16_ratio, "sustained_over_burst_fp8": fp8_ratio}
    for kind in ("bf16", "fp8_tensorwise", "fp8_tensorwise_fast", "fp8_rowwise", "fp8_rowwise_fast"):
        values = [r["efficiency"][kind] for r in model_rows if r["efficiency"][kind]]
        if values:
            ratio = bf16_ratio if kind == "bf16" else fp8_ratio
            summary[kind] = {"median_burst": statistics.median(values), "max_burst": max(values),
                             "max_sustained": max(values) * ratio}
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}: sustained / burst GEMM rate "
          f"bf16 {bf16_ratio:.3f}, fp8 {fp8_ratio:.3f}")
    for kind, s in summary.items():
        if isinstance(s, dict):
            print(f"#   {kind:>20}: median {s['median_burst']:.3f}, max {s['max_burst']:.3f} of peak in bursts; "
                  f"max sustained {s['max_sustained']:.3f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "peak_flops": a.peak,
                       "peak_fp8_flops": a.peak_fp8, "summary": summary, "gemms": rows}, f, indent=1)


if __name__ == "__main__":
    main()
