#!/usr/bin/env python3
"""The PyTorch peer of `loom run --model gpt2-small --backend cuda` (issue 14's speed benchmark).

GPT-2 124M (12 layers, 12 heads, hidden 768, vocabulary 50257, sequence 1024) with the loom run's shape of
a step: micro-batches of --micro-batch sequences, --global-batch sequences a step (gradient accumulation),
dropout 0.1 on the embeddings, the attention probabilities and both residual branches, bf16 autocast over
fp32 weights, fused AdamW, causal attention through scaled_dot_product_attention (flash on Hopper). Runs
eagerly and under torch.compile and prints tokens/s and TFLOP/s per GPU counted with the formula that
`loom run` prints (Megatron's 72·B·s·l·h²·(1 + s/6h + V/12lh) per step: no recompute), so the figures
stand side by side with loom's run log:

    python3 bench/gpu/gpt2_torch.py [--steps 30] [--global-batch 16] [--micro-batch 8] [--modes eager,compile]

Random tokens: the step time does not depend on the data. MFU is over --peak-tflops (989: the H100 and H200
SXM dense bf16 tensor-core peak, NVIDIA's H100 datasheet; both chips have the same SMs and clocks).
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

LAYERS, HEADS, HIDDEN, VOCAB, SEQ = 12, 12, 768, 50257, 1024


class Block(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(HIDDEN)
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        self.ln2 = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)
        self.dropout = dropout

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(HIDDEN, dim=2)
        q, k, v = (z.view(b, t, HEADS, h // HEADS).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, h)
        x = x + F.dropout(self.proj(y), p, self.training)
        return x + F.dropout(self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh")), p, self.training)


class GPT2(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, HIDDEN)
        self.wpe = nn.Embedding(SEQ, HIDDEN)
        self.blocks = nn.ModuleList(Block(dropout) for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(HIDDEN)
        self.dropout = dropout
        # GPT-2's initialisation (Radford et al. 2019): N(0, 0.02), the residual projections scaled by
        # 1/√(2·layers), zero biases.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * LAYERS) if name.endswith(("proj.weight", "down.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = F.dropout(self.wte(idx) + self.wpe(torch.arange(t, device=idx.device)), self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied, as GPT-2
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))


def flops_per_step(sequences):
    """Megatron's count for one step without recompute (Narayanan et al. 2021, eq. 3 with the 4 → 3)."""
    l, h, s, v = LAYERS, HIDDEN, SEQ, VOCAB
    return 72 * sequences * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


def run(mode, args):
    torch.manual_seed(0)
    model = GPT2(0.1).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), fused=True)
    step_model = torch.compile(model) if mode == "compile" else model
    accumulation = args.global_batch // args.micro_batch
    data = torch.randint(0, VOCAB, (accumulation, args.micro_batch, SEQ + 1), device="cuda")
    times, losses = [], []
    for step in range(args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for m in range(accumulation):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(data[m, :, :-1], data[m, :, 1:]) / accumulation
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss.item() * accumulation)
    warm = times[min(5, len(times) - 1):]  # the first steps compile, autotune and allocate
    step_s = statistics.median(warm)
    tokens = args.global_batch * SEQ
    tflops = flops_per_step(args.global_batch) / step_s / 1e12
    return step_s, tokens / step_s, tflops, losses[-1], times[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    args = parser.parse_args()
    if args.global_batch % args.micro_batch:
        parser.error("--global-batch must be a multiple of --micro-batch")
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | GPT-2 124M, seq {SEQ}, global batch "
          f"{args.global_batch}, micro-batch {args.micro_batch}, {args.steps} steps, median after the 5th")
    print(f"{'mode':<10} {'step s':>8} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU %':>6} {'first step s':>12} {'loss':>7}")
    for mode in args.modes.split(","):
        step_s, tok_s, tflops, loss, first = run(mode, args)
        print(f"torch-{mode:<4} {step_s:8.4f} {tok_s:10.0f} {tflops:8.1f} {100 * tflops / args.peak_tflops:6.1f} "
              f"{first:12.2f} {loss:7.3f}", flush=True)


if __name__ == "__main__":
    main()
