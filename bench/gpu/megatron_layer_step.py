#!/usr/bin/env python3
"""Time one whole tensor-parallel shard of a Megatron-LM transformer layer, forward and backward,
against the sum of its ops timed alone (bench/gpu/megatron_layer_ops.py).

The simulator prices a layer as the sum of its kernels. This checks that sum on a real GPU: the
layer runs as Megatron-LM (2022, sequence parallel on, no recompute) runs it on one TP rank, with
fp32 main-grad accumulation in the weight-gradient GEMMs and the bias gradients, and with the TP
collectives replaced by free stand-ins (one GPU: all-gather hands over a buffer, reduce-scatter
a slice). What the layer takes over the sum is what running the kernels back to back costs or
saves (launch gaps, caches), which a per-kernel cost model does not see.

  python3 bench/gpu/megatron_layer_step.py --preset 22b --ops ops.json
"""
import argparse
import json
import math
import statistics

import torch
import torch._functorch.config
import torch.nn.functional as F

from megatron_layer_ops import PRESETS, fused, timed


class FakeAllGather(torch.autograd.Function):
    """Stands in for the sequence-parallel all-gather: returns a full-sequence buffer; its
    backward (a reduce-scatter) hands back a slice. No GPU work either way."""

    @staticmethod
    def forward(ctx, x, full):
        ctx.rows = x.shape[0]
        return full

    @staticmethod
    def backward(ctx, g):
        return g[: ctx.rows], None


class FakeReduceScatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, rows, full_grad):
        ctx.full_grad = full_grad
        return x[:rows]

    @staticmethod
    def backward(ctx, g):
        return ctx.full_grad, None, None


class Linear(torch.autograd.Function):
    """Megatron's linear with gradient-accumulation fusion: the weight gradient is accumulated
    into an fp32 main_grad by the GEMM (beta = 1); the bias gradient sums the output gradient."""

    @staticmethod
    def forward(ctx, x, w, b, main_grad):
        ctx.save_for_backward(x, w)
        ctx.main_grad, ctx.has_bias = main_grad, b is not None
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        dx = g @ w
        torch.addmm(ctx.main_grad, g.t(), x, out_dtype=torch.float32, out=ctx.main_grad)
        db = g.sum(0) if ctx.has_bias else None
        return dx, None, db, None


def build(hidden, heads, mb, tp, seq):
    h, hn, nh = hidden, hidden // heads, heads // tp
    tokens, tokens_sp, ffn = seq * mb, seq * mb // tp, 4 * hidden // tp
    dev, bf = "cuda", torch.bfloat16

    def param(*shape):
        return (torch.randn(*shape, device=dev, dtype=bf) * 0.02).requires_grad_()

    p = {
        "ln1_w": torch.ones(h, device=dev, dtype=bf, requires_grad=True), "ln1_b": param(h),
        "ln2_w": torch.ones(h, device=dev, dtype=bf, requires_grad=True), "ln2_b": param(h),
        "qkv_w": param(3 * h // tp, h), "qkv_b": param(3 * h // tp),
        "proj_w": param(h, h // tp), "proj_b": param(h),
        "up_w": param(ffn, h), "up_b": param(ffn),
        "down_w": param(h, ffn), "down_b": param(h),
    }
    main = {k: torch.zeros(v.shape, device=dev, dtype=torch.float32) for k, v in p.items() if k.endswith("_w") and v.dim() == 2}
    full_in = [] if tp == 1 else [torch.randn(tokens, h, device=dev, dtype=bf, requires_grad=True) for _ in range(2)]
    full_grad = None if tp == 1 else torch.randn(tokens, h, device=dev, dtype=bf)
    bda = fused(lambda x, b, r: r + F.dropout(x + b, 0.1, training=True))
    bias_gelu = fused(lambda x, b: F.gelu(x + b, approximate="tanh"))
    scale = 1.0 / math.sqrt(hn)

    def layer(x):
        ln = F.layer_norm(x, (h,), p["ln1_w"], p["ln1_b"])
        a = ln if tp == 1 else FakeAllGather.apply(ln, full_in[0])
        qkv = Linear.apply(a, p["qkv_w"], p["qkv_b"], main["qkv_w"])
        # [s, b, np, 3·hn] → q, k, v as [b·np, s, hn]
        qkv = qkv.view(seq, mb * nh, 3 * hn)
        q, k, v = (t.transpose(0, 1) for t in qkv.split(hn, dim=-1))
        scores = torch.baddbmm(torch.empty(mb * nh, seq, seq, device=dev, dtype=bf), q, k.transpose(1, 2),
                               beta=0.0, alpha=scale)
        probs = F.dropout(F.softmax(scores, dim=-1), 0.1, training=True)
        ctx = torch.bmm(probs, v).transpose(0, 1).reshape(tokens, h // tp)
        o = Linear.apply(ctx, p["proj_w"], None, main["proj_w"])
        o = o if tp == 1 else FakeReduceScatter.apply(o, tokens_sp, full_grad)
        x = bda(o, p["proj_b"], x)
        ln = F.layer_norm(x, (h,), p["ln2_w"], p["ln2_b"])
        a = ln if tp == 1 else FakeAllGather.apply(ln, full_in[1])
        up = Linear.apply(a, p["up_w"], None, main["up_w"])
        act = bias_gelu(up, p["up_b"])
        down = Linear.apply(act, p["down_w"], None, main["down_w"])
        down = down if tp == 1 else FakeReduceScatter.apply(down, tokens_sp, full_grad)
        return bda(down, p["down_b"], x)

    xs = [torch.randn(tokens_sp, h, device=dev, dtype=bf, requires_grad=True) for _ in range(2)]
    g = torch.randn(tokens_sp, h, device=dev, dtype=bf)
    layer.params, layer.main_grads = p, main
    return layer, xs, g


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", action="append", choices=sorted(PRESETS))
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--ops", help="JSON from megatron_layer_ops.py: compare with the sum of the ops")
    ap.add_argument("--out")
    a = ap.parse_args()
    torch._functorch.config.donated_buffer = False
    ops = json.load(open(a.ops))["models"] if a.ops else {}
    result = {"device": torch.cuda.get_device_name(), "models": {}}
    print(f"{'model':>6} {'fwd_ms':>8} {'fwd+bwd_ms':>10} {'ops fwd':>8} {'ops f+b':>8} {'layer/ops':>9}")
    for name in a.preset or ["22b"]:
        hidden, heads, mb = PRESETS[name]
        layer, xs, g = build(hidden, heads, mb, a.tp, a.seq)
        fwd = timed(lambda x: layer(x), [(x,) for x in xs], a.reps)
        step = timed(lambda x: layer(x).backward(g), [(x,) for x in xs], a.reps)
        row = {"fwd_ms": fwd, "fwd_bwd_ms": step}
        line = f"{name:>6} {fwd:8.3f} {step:10.3f}"
        if name in ops:
            once = {"layer_norm": 2, "bias_dropout_add": 2}
            f_sum = sum((r["fwd_ms"] or 0) * once.get(r["op"], 1) for r in ops[name]["ops"])
            b_sum = sum((r["bwd_ms"] or 0) * once.get(r["op"], 1) for r in ops[name]["ops"])
            row.update({"ops_fwd_ms": f_sum, "ops_fwd_bwd_ms": f_sum + b_sum})
            line += f" {f_sum:8.3f} {f_sum + b_sum:8.3f} {step / (f_sum + b_sum):9.3f}"
        print(line)
        result["models"][name] = row
        del layer, xs, g
        torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
