#!/usr/bin/env python3
"""A GPT of Loom's `gpt` preset family (learned positions, tied embeddings, GELU, LayerNorm, biases, no
dropout; gpt-tiny by default: 4 layers, hidden 128, 4 heads, vocab 256, seq 128) trained in PyTorch on
the CPU with AdamW, for the tokens/s comparison in compare_tokens_per_s.py. Reads the same llm.c .bin
token file as `loom run`. With --profile it prints torch.profiler's per-op table (self CPU time) to stderr.

    /usr/bin/python3 bench/exec/gpt_torch.py --data tokens.bin --steps 20 --batch 8 --threads 1 \
        --hidden 256 --seq 256
"""
import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        B, S, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(B, S, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
            else self._attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(B, S, h))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    @staticmethod
    def _attention(q, k, v):
        S = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        att = att.masked_fill(torch.triu(torch.ones(S, S, dtype=torch.bool), 1), float("-inf"))
        return torch.softmax(att, dim=-1) @ v


class GPT(nn.Module):
    def __init__(self, layers=4, h=128, heads=4, vocab=256, seq=128):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(h)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tokens = np.fromfile(args.data, dtype=np.uint16, offset=1024).astype(np.int64)
    model = GPT(layers=args.layers, h=args.hidden, heads=args.heads, seq=args.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    times = []
    B, S = args.batch, args.seq
    profiler = None
    for step in range(args.steps):
        if args.profile and step == 2:
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            profiler.__enter__()
        starts = [((step * B + j) * S) % (len(tokens) - S - 1) for j in range(B)]
        x = torch.from_numpy(np.stack([tokens[s:s + S] for s in starts]))
        y = torch.from_numpy(np.stack([tokens[s + 1:s + S + 1] for s in starts]))
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    if profiler is not None:
        profiler.__exit__(None, None, None)
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)
    steady = sorted(times[2:])[len(times[2:]) // 2] if len(times) > 3 else times[-1]
    print(json.dumps({"framework": "pytorch " + torch.__version__, "threads": args.threads,
                      "median_step_time_s": steady, "tokens_per_s": B * S / steady, "final_loss": float(loss)}))


if __name__ == "__main__":
    main()
