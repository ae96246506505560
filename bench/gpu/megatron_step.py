#!/usr/bin/env python3
"""Time whole training steps of a GPT built like Megatron-LM's on one GPU, for `loom sim`.

The model: word and position embeddings, `--layers` transformer layers as
megatron_layer_step.py builds them (tp 1: fused bias-GELU and bias-dropout-add, unfused attention,
weight gradients accumulated into fp32 main grads by the GEMM), final layer norm, the LM head tied
to the word embedding, fp32 cross-entropy. The optimizer step does Megatron's passes over the fp32
main grads: scale by 1/dp, the gradient norm, fused Adam on fp32 master weights, the copy back
into the bf16 parameters, zeroing the main grads. Prints the median step time (and its parts) and
the model JSON to give `loom sim`:

  python3 bench/gpu/megatron_step.py --hidden 2048 --heads 16 --layers 24 --micro-batch 2
  loom sim --model model.json --cluster dgx-h100 --gpus 1 --global-batch 2 --tp 1 --pp 1 \\
      --micro-batch 2 --recompute none --attention unfused --grad-bytes 4
"""
import argparse
import json
import statistics

import torch
import torch._functorch.config
import torch.nn.functional as F

from megatron_layer_step import Linear, build


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=51200)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", help="write the times and the model JSON here")
    a = ap.parse_args()
    torch._functorch.config.donated_buffer = False
    dev, bf, h, mb, seq = "cuda", torch.bfloat16, a.hidden, a.micro_batch, a.seq
    tokens = mb * seq

    layers = [build(h, a.heads, mb, 1, seq)[0] for _ in range(a.layers)]
    word = (torch.randn(a.vocab, h, device=dev, dtype=bf) * 0.02).requires_grad_()
    pos = (torch.randn(seq, h, device=dev, dtype=bf) * 0.02).requires_grad_()
    lnf_w = torch.ones(h, device=dev, dtype=bf, requires_grad=True)
    lnf_b = torch.zeros(h, device=dev, dtype=bf, requires_grad=True)
    word_main = torch.zeros(a.vocab, h, device=dev, dtype=torch.float32)

    # Every parameter with its fp32 main grad: the GEMM weights accumulate into theirs directly;
    # the others (norms, biases, embeddings) get a bf16 .grad that is added in after the backward.
    params, mains = [word, pos, lnf_w, lnf_b], [word_main] + [torch.zeros(p.shape, device=dev) for p in (pos, lnf_w, lnf_b)]
    for layer in layers:
        for name, p in layer.params.items():
            params.append(p)
            mains.append(layer.main_grads.get(name, torch.zeros(p.shape, device=dev)))
    direct = {id(m) for layer in layers for m in layer.main_grads.values()}
    masters = [p.detach().float().requires_grad_() for p in params]
    for m, g in zip(masters, mains):
        m.grad = g
    adam = torch.optim.Adam(masters, lr=1e-5, fused=True)
    n_params = sum(p.numel() for p in params)

    ids = torch.randint(0, a.vocab, (seq, mb), device=dev)
    labels = torch.randint(0, a.vocab, (tokens,), device=dev)

    def forward_backward():
        x = F.embedding(ids, word) + pos[:, None, :]
        x = F.dropout(x, 0.1, training=True).reshape(tokens, h)
        for layer in layers:
            x = layer(x)
        x = F.layer_norm(x, (h,), lnf_w, lnf_b)
        logits = Linear.apply(x, word, None, word_main)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        for p, m in zip(params, mains):
            if p.grad is not None and (id(m) not in direct or p is word):
                m.add_(p.grad)
                p.grad = None

    def optimizer_step():
        torch._foreach_mul_(mains, 1.0)  # Megatron's DDP scales the buffer by 1/dp, even at dp 1
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(mains)))
        adam.step()
        with torch.no_grad():
            for p, m in zip(params, masters):  # the master weights into the bf16 parameters
                p.copy_(m)
        torch._foreach_zero_(mains)
        return norm

    events = []
    for step in range(a.warmup + a.steps):
        e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        e[0].record()
        forward_backward()
        e[1].record()
        optimizer_step()
        e[2].record()
        if step >= a.warmup:
            events.append(e)
    torch.cuda.synchronize()
    fb = statistics.median(e[0].elapsed_time(e[1]) for e in events)
    opt = statistics.median(e[1].elapsed_time(e[2]) for e in events)
    total = statistics.median(e[0].elapsed_time(e[2]) for e in events)
    model = {"name": f"gpt-h{h}-l{a.layers}", "layers": a.layers, "hidden": h, "heads": a.heads, "kv_heads": a.heads,
             "ffn_hidden": 4 * h, "vocab": a.vocab, "seq_len": seq}
    print(f"# {torch.cuda.get_device_name()}: {n_params / 1e9:.2f} B parameters, micro-batch {mb} x {seq}; "
          f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    print(f"step {total:.2f} ms (forward + backward {fb:.2f}, optimizer {opt:.2f}), median of {a.steps}")
    print(f"model JSON: {json.dumps(model)}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "step_ms": total, "forward_backward_ms": fb,
                       "optimizer_ms": opt, "micro_batch": mb, "params": n_params, "model": model}, f, indent=1)


if __name__ == "__main__":
    main()
