#!/usr/bin/env python3
"""torchtitan's Llama 3 TransformerBlock, eager and compiled: what torch.compile's fusion of the
element-wise ops saves on this GPU, beside what `loom sim --elementwise eager|fused` predicts.

The block is torchtitan's as its December 2024 benchmark ran it (models/llama/model.py at 9dec370):
RoPE as a complex multiply in fp32 (apply_rotary_emb), repeat_kv copying K and V to every query head,
scaled_dot_product_attention, SwiGLU as silu then multiply, and RMSNorm as ATen's composite rms_norm of
PyTorch 2.4-2.6 (upcast, pow, mean, rsqrt, multiply, downcast, weight), written out here so that a
PyTorch with a fused rms_norm kernel still runs what those runs ran. Parameters and activations in
bf16, no activation checkpointing, forward and backward of `--layers` blocks back to back; compiled,
each block on its own (torchtitan's apply_compile, fullgraph). Loom's figure is the difference of two
`loom sim` steps of the whole model on one GPU (--recompute none), eager minus fused, per layer: the
layers' element-wise kernels, plus one final norm's (a 1/65 share of the norms).

  python3 bench/gpu/torchtitan_block.py --layers 4 [--loom "gpu-bundle/run.sh loom"] [--out block.json]
"""
import argparse
import json
import shlex
import statistics
import subprocess

import torch
import torch.nn as nn
import torch.nn.functional as F

# Llama 3 8B (torchtitan's llama3_8b: dim 4096, 32 heads, 8 KV heads, FFN 14336, rope theta 500000).
DIM, HEADS, KV_HEADS, FFN, EPS, THETA, LAYERS_8B = 4096, 32, 8, 14336, 1e-5, 500000.0, 32


def precompute_freqs_cis(dim, end, theta):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    return torch.polar(torch.ones(end, dim // 2), torch.outer(t, freqs).float())


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs = freqs_cis[: xq_.shape[1]].view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(
        bs, slen, n_kv_heads * n_rep, head_dim)


class RMSNorm(nn.Module):
    """ATen's composite rms_norm (aten/src/ATen/native/layer_norm.cpp, PyTorch 2.4-2.6)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.to(torch.float32)
        rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True).add_(self.eps))
        return (x32 * rstd).type_as(x) * self.weight


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.wq = nn.Linear(DIM, HEADS * self.head_dim, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * self.head_dim, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * self.head_dim, bias=False)
        self.wo = nn.Linear(HEADS * self.head_dim, DIM, bias=False)
        self.w1 = nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, FFN, bias=False)
        self.attention_norm = RMSNorm(DIM, EPS)
        self.ffn_norm = RMSNorm(DIM, EPS)

    def attention(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq = self.wq(x).view(bs, seqlen, -1, self.head_dim)
        xk = self.wk(x).view(bs, seqlen, -1, self.head_dim)
        xv = self.wv(x).view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        keys, values = repeat_kv(xk, HEADS // KV_HEADS), repeat_kv(xv, HEADS // KV_HEADS)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
                                             is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, seqlen, -1))

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        n = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(n)) * self.w3(n))


def time_blocks(blocks, x, freqs_cis, grad, reps, warmup):
    def step():
        out = x
        for b in blocks:
            out = b(out, freqs_cis)
        out.backward(grad)
        x.grad = None
        for b in blocks:
            for p in b.parameters():
                p.grad = None

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def loom_step(loom, elementwise, batch, seq):
    cmd = shlex.split(loom) + ["sim", "--model", "llama3-8b", "--gpus", "1", "--global-batch", str(batch), "--seq",
                               str(seq), "--cluster", "dgx-h100", "--micro-batch", str(batch), "--recompute", "none",
                               "--elementwise", elementwise, "--format", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["step_time_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--loom", default="", help="command that runs loom, for its prediction")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    freqs_cis = precompute_freqs_cis(DIM // HEADS, a.seq, THETA).to(dev)
    blocks = [Block().to(dev, torch.bfloat16) for _ in range(a.layers)]
    x = torch.randn(a.batch, a.seq, DIM, device=dev, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn_like(x)
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "layers": a.layers, "batch": a.batch,
              "seq": a.seq}
    result["eager_s"] = time_blocks(blocks, x, freqs_cis, grad, a.reps, a.warmup)
    compiled = [torch.compile(b, fullgraph=True) for b in blocks]
    result["compiled_s"] = time_blocks(compiled, x, freqs_cis, grad, a.reps, a.warmup)
    result["measured_eager_over_compiled"] = result["eager_s"] / result["compiled_s"]
    result["measured_extra_per_layer_s"] = (result["eager_s"] - result["compiled_s"]) / a.layers
    print(f"{a.layers} blocks, {a.batch} x {a.seq} tokens, forward + backward: eager {1e3 * result['eager_s']:.2f} ms, "
          f"compiled {1e3 * result['compiled_s']:.2f} ms, ratio {result['measured_eager_over_compiled']:.3f}; "
          f"eager costs {1e3 * result['measured_extra_per_layer_s']:.3f} ms a layer more")
    if a.loom:
        eager, fused = loom_step(a.loom, "eager", a.batch, a.seq), loom_step(a.loom, "fused", a.batch, a.seq)
        result["loom_extra_per_layer_s"] = (eager - fused) / LAYERS_8B
        print(f"loom sim (dgx-h100 preset), whole 8B step: eager {eager:.4f} s, fused {fused:.4f} s: "
              f"{1e3 * result['loom_extra_per_layer_s']:.3f} ms a layer more eager")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
