#!/usr/bin/env python3
"""Time fused causal attention (PyTorch's scaled_dot_product_attention) forward and backward on
this GPU, for the cost file's flash_attention_efficiency.

Shapes are one TP-8 shard of the Korthikanti et al. models (heads/8 of head dim 96-160, micro-batch
4 or 1, sequence 2048) and two LLaMA-like ones (head dim 128, sequence 4096). FLOPs are counted as
Loom counts them: the forward is the causal half of QK^T and AV, 2·b·s²·heads·d; the backward 2.5
times that. The efficiency is FLOPs / (time · peak) over forward + backward, per backend PyTorch
has here, with the sustained/burst GEMM ratio measured in the same run (megatron_layer_ops.py).

  python3 bench/gpu/flash_attention.py --out flash.json

--long adds one GPU's attention of Llama 3 8B at 8K, 32K and 64K tokens (32 heads of 128, as torchtitan's
repeat_kv hands them to SDPA; 32K and 64K are also the per-rank tiles of its CP rows), where the cost files'
curves are extrapolated: a check of that extrapolation for both backends, not an input of the fit.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from megatron_layer_ops import ceilings, timed

SHAPES = [  # (name, micro-batch, heads on one GPU, head dim, sequence)
    ("22b-tp8", 4, 8, 96, 2048), ("175b-tp8", 1, 12, 128, 2048), ("530b-tp8", 1, 16, 160, 2048),
    ("1t-tp8", 1, 20, 160, 2048), ("llama-32x128-s4096", 1, 32, 128, 4096), ("llama-8x128-s4096", 2, 8, 128, 4096),
]
LONG_SHAPES = [("llama3-8b-s8192", 1, 32, 128, 8192), ("llama3-8b-s32768", 1, 32, 128, 32768),
               ("llama3-8b-s65536", 1, 32, 128, 65536)]
BACKENDS = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--peak", type=float, default=989.4e12)
    ap.add_argument("--out")
    ap.add_argument("--long", action="store_true", help="also time the long-sequence shapes (LONG_SHAPES)")
    a = ap.parse_args()
    rows = []
    print(f"{'shape':>20} {'backend':>9} {'fwd_ms':>8} {'f+b_ms':>8} {'efficiency':>10}")
    for name, b, h, d, s in SHAPES + (LONG_SHAPES if a.long else []):
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        g = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
        fwd_flops = 2.0 * b * s * s * h * d
        long = (name, b, h, d, s) in LONG_SHAPES
        for backend, which in BACKENDS.items():
            if long and backend == "efficient":
                continue  # seconds per call at these lengths, and no stack runs it there
            def attend():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            try:
                with sdpa_kernel(which) if which is not None else torch.enable_grad():
                    fwd = timed(lambda: attend(), [()], a.reps)
                    step = timed(lambda: torch.autograd.grad(attend(), (q, k, v), g), [()], a.reps)
            except RuntimeError as e:
                print(f"{name:>20} {backend:>9} unavailable ({str(e).splitlines()[0][:60]})")
                continue
            eff = 3.5 * fwd_flops / (step * 1e-3 * a.peak)
            rows.append({"shape": name, "batch": b, "heads": h, "head_dim": d, "seq": s, "backend": backend,
                         "fwd_ms": fwd, "fwd_bwd_ms": step, "loom_flops": 3.5 * fwd_flops, "efficiency": eff,
                         "long": long})
            print(f"{name:>20} {backend:>9} {fwd:8.3f} {step:8.3f} {eff:10.3f}")
        del q, k, v, g
    c = ceilings(a.reps)
    factor = c["gemm_8192_sustained_flops_per_s"] / c["gemm_8192_flops_per_s"]
    default = statistics.median(r["efficiency"] for r in rows if r["backend"] == "default" and not r["long"])
    print(f"# {torch.cuda.get_device_name()}: default backend median efficiency {default:.3f} (bursts); "
          f"sustained / burst GEMM rate {factor:.3f}: flash_attention_efficiency {default * factor:.3f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "peak_flops": a.peak,
                       "ceilings": c, "attention": rows}, f, indent=1)


if __name__ == "__main__":
    main()
