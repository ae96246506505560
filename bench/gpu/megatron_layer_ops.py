#!/usr/bin/env python3
"""Time each op of one tensor-parallel shard of a Megatron-LM transformer layer on this GPU.

The ops and shapes are those Megatron-LM (2022, sequence parallel on) runs on one TP rank:
layer norm on the sequence-parallel slice, the QKV / projection / MLP GEMMs with their input- and
weight-gradient GEMMs, the unfused attention core (QK^T baddbmm, softmax, dropout, AV bmm) and the
fused element-wise ops (bias-GELU, bias-dropout-add). Communication is not timed (one GPU).
Each op is timed alone with CUDA events, median of --reps after warm-up, inputs rotated so that
repeats do not read their inputs from L2. Prints a table and writes JSON (--out) that
bench/gpu/compare_layer_ops.py sets against `loom sim --trace` on the same layer.

  python3 bench/gpu/megatron_layer_ops.py --preset 22b --out ops_22b.json
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch._functorch.config
import torch.nn.functional as F

WGRAD = {"fused": True}  # fp32 main-grad accumulation in the GEMM epilogue, as Megatron's fusion
PRESETS = {  # Korthikanti et al. 2022 Table 5 models at tp 8 (hidden, heads, micro-batch)
    "22b": (6144, 64, 4),
    "175b": (12288, 96, 1),
    "530b": (20480, 128, 1),
    "1t": (25600, 160, 1),
}


def timed(fn, sets, reps, warmup=3):
    """Median milliseconds of fn(inputs) on the GPU, cycling through the input sets.

    The calls are queued behind a sleep kernel so that the events time the GPU's work, not the
    host's dispatch: in a real step the host runs ahead of the GPU, queued behind large GEMMs."""
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    torch.cuda._sleep(100_000_000)  # ~50 ms at 2 GHz: time for the host to queue every call
    for i, (a, b) in enumerate(events):
        a.record()
        fn(*sets[i % len(sets)])
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


def fused(fn):
    """Megatron fuses these element-wise chains into one kernel (TorchScript); torch.compile does
    the same here. Falls back to eager (more passes over memory) if compilation fails."""
    state = {"fn": torch.compile(fn, dynamic=False)}  # one kernel per shape, as TorchScript fusion

    def call(*args):
        try:
            return state["fn"](*args)
        except Exception as e:  # noqa: BLE001
            if state["fn"] is fn:
                raise
            print(f"# torch.compile failed ({type(e).__name__}); timing the eager ops")
            state["fn"] = fn
            return fn(*args)
    return call


def rand(*shape, dtype=torch.bfloat16, grad=False):
    t = torch.randn(*shape, device="cuda", dtype=dtype)
    return t.requires_grad_(grad) if grad else t


def copies(make, nbytes, budget=1 << 30):
    """As many input sets as keep repeats out of L2, within a memory budget."""
    n = max(1, min(4, budget // max(1, nbytes)))
    return [make() for _ in range(n)]


def run(hidden, heads, mb, tp, seq, reps):
    h, hn, nh = hidden, hidden // heads, heads // tp
    tokens, tokens_sp, ffn = seq * mb, seq * mb // tp, 4 * hidden // tp
    ab = 2
    rows = []

    def add(op, fwd_ms=None, bwd_ms=None, flops=None, nbytes=None, loom=None):
        rows.append({"op": op, "fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "flops": flops, "bytes": nbytes, "loom": loom})

    # GEMMs: forward, input gradient, weight gradient into an fp32 main-grad (beta = 1).
    def linear(op, rows_, in_f, out_f):
        x = copies(lambda: (rand(rows_, in_f), rand(out_f, in_f)), (rows_ * in_f + out_f * in_f) * ab)
        fwd = timed(lambda a, w: F.linear(a, w), x, reps)
        g = copies(lambda: (rand(rows_, out_f), rand(out_f, in_f)), (rows_ * out_f + out_f * in_f) * ab)
        dgrad = timed(lambda gg, w: gg @ w, g, reps)
        gx = copies(lambda: (rand(rows_, out_f), rand(rows_, in_f), torch.zeros(out_f, in_f, device="cuda")),
                    (rows_ * (out_f + in_f)) * ab + out_f * in_f * 4)

        def wgrad_fp32(gg, a, main):
            if WGRAD["fused"]:
                try:
                    torch.addmm(main, gg.t(), a, out_dtype=torch.float32, out=main)
                    return
                except (TypeError, RuntimeError) as e:
                    print(f"# addmm with an fp32 output failed ({e}); weight gradients are GEMM + add")
                    WGRAD["fused"] = False
            main.add_(gg.t() @ a)
        wgrad = timed(wgrad_fp32, gx, reps)
        fl = 2.0 * rows_ * in_f * out_f
        add(op, fwd, None, fl, None, loom=op)
        add(op + " dgrad", None, dgrad, fl, None, loom=op + "_bwd")
        add(op + " wgrad", None, wgrad, fl, None, loom=op + "_bwd")

    def elementwise(op, fn, shapes, fwd_bytes, bwd_bytes, loom):
        sets = copies(lambda: tuple(rand(*s, grad=True) for s in shapes), sum(math.prod(s) for s in shapes) * ab * 3)
        fwd = timed(lambda *a: fn(*a), sets, reps)
        outs = [fn(*s) for s in sets]
        grads = [torch.randn_like(o) for o in outs]
        bsets = [(o, s, gr) for o, s, gr in zip(outs, sets, grads)]
        bwd = timed(lambda o, s, gr: torch.autograd.grad(o, s, gr, retain_graph=True), bsets, reps)
        add(op, fwd, bwd, None, (fwd_bytes, bwd_bytes), loom=loom)
        del outs, grads, bsets, sets

    ln_w = torch.ones(h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ln_b = torch.zeros(h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    elementwise("layer_norm", lambda x: F.layer_norm(x, (h,), ln_w, ln_b), [(tokens_sp, h)],
                2 * ab * tokens_sp * h, 3 * ab * tokens_sp * h, "norm")
    linear("qkv", tokens, h, 3 * h // tp)

    # Attention core on [micro-batch · local heads, seq, head dim].
    bn = mb * nh
    scale = 1.0 / math.sqrt(hn)
    qk = copies(lambda: (rand(bn, seq, hn, grad=True), rand(bn, seq, hn, grad=True)), 2 * bn * seq * hn * ab)
    fwd = timed(lambda q, k: torch.baddbmm(torch.empty(bn, seq, seq, device="cuda", dtype=torch.bfloat16), q,
                                           k.transpose(1, 2), beta=0.0, alpha=scale), qk, reps)
    outs = [(o, q, k, torch.randn_like(o)) for q, k in qk[:2] for o in [torch.bmm(q, k.transpose(1, 2))]]
    bwd = timed(lambda o, q, k, g: torch.autograd.grad(o, (q, k), g, retain_graph=True), outs, reps)
    del outs
    fl = 2.0 * bn * seq * seq * hn
    add("qk", fwd, bwd, fl, None, loom="qk")
    scores = bn * seq * seq
    elementwise("softmax", lambda s: F.softmax(s, dim=-1), [(bn, seq, seq)], 2 * ab * scores, 3 * ab * scores, "softmax")
    elementwise("attn_dropout", lambda s: F.dropout(s, 0.1, training=True), [(bn, seq, seq)],
                (2 * ab + 1) * scores, (2 * ab + 1) * scores, "attn_dropout")
    pv = copies(lambda: (rand(bn, seq, seq, grad=True), rand(bn, seq, hn, grad=True)), bn * seq * (seq + hn) * ab)
    fwd = timed(lambda p, v: torch.bmm(p, v), pv, reps)
    outs = [(o, p, v, torch.randn_like(o)) for p, v in pv[:2] for o in [torch.bmm(p, v)]]
    bwd = timed(lambda o, p, v, g: torch.autograd.grad(o, (p, v), g, retain_graph=True), outs, reps)
    del outs, pv, qk
    add("av", fwd, bwd, fl, None, loom="av")

    linear("attn_out", tokens, h // tp, h)
    # Megatron's fused bias-dropout-add on the sequence-parallel slice: read x, bias and the
    # residual; write the output and the 1-byte mask.
    bias = torch.zeros(h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    bda = fused(lambda x, r: r + F.dropout(x + bias, 0.1, training=True))
    elementwise("bias_dropout_add", bda, [(tokens_sp, h), (tokens_sp, h)],
                (3 * ab + 1) * tokens_sp * h, (2 * ab + 1) * tokens_sp * h, "residual")
    linear("mlp_up", tokens, h, ffn)
    b1 = torch.zeros(ffn, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    bias_gelu = fused(lambda x: F.gelu(x + b1, approximate="tanh"))
    elementwise("bias_gelu", bias_gelu, [(tokens, ffn)], 2 * ab * tokens * ffn, 3 * ab * tokens * ffn, "gelu")
    linear("mlp_down", tokens, ffn, h)
    return rows


def adam(reps, params=1 << 29):
    """One fused Adam step over fp32 parameters: reads the gradient, reads and writes the
    parameter and both moments (28 bytes per parameter)."""
    w = torch.zeros(params, device="cuda", dtype=torch.float32, requires_grad=True)
    w.grad = torch.randn_like(w)
    opt = torch.optim.Adam([w], lr=1e-4, fused=True)
    ms = timed(lambda: opt.step(), [()], reps)
    return {"params": params, "ms": ms, "bytes_per_s": 28 * params / (ms * 1e-3)}


def gemm_sweep(reps):
    """bf16 GEMMs from small to large (tokens × features × features), for the cost file's
    efficiency curve over GEMM size."""
    points = []
    for m in (256, 1024, 4096, 16384):
        for n in (512, 2048, 8192):
            for k in (512, 2048, 8192):
                sets = copies(lambda: (rand(m, k), rand(k, n)), (m * k + k * n) * 2)
                ms = timed(lambda a, b: a @ b, sets, reps)
                points.append({"m": m, "n": n, "k": k, "ms": ms})
    return points


def ceilings(reps, sustain_s=15.0):
    """The device's two ceilings: a large copy (bytes read + written) and a large bf16 GEMM, the
    GEMM both in a short burst after a rest and sustained for `sustain_s` seconds. A training step
    keeps the tensor cores busy for seconds at a time; where the board's power limit binds, its
    clocks and GEMM rate settle lower than any short benchmark shows."""
    n = 1 << 28  # 512 MiB of bf16 per buffer
    src = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    dst = torch.empty_like(src[0])
    ms = timed(lambda s: dst.copy_(s), [(s,) for s in src], reps)
    copy_bw = 2 * n * 2 / (ms * 1e-3)
    del src, dst

    def gemm():
        x, y = rand(8192, 8192), rand(8192, 8192)
        return lambda: x @ y
    flops = 2 * 8192**3
    burst, sustained = burst_and_sustained(gemm, sustain_s)
    return {"copy_bytes_per_s": copy_bw, "gemm_8192_flops_per_s": flops * burst,
            "gemm_8192_sustained_flops_per_s": flops * sustained, "sustain_s": sustain_s}


def burst_and_sustained(make, sustain_s):
    """Calls per second of a kernel in a burst after a rest, and sustained for `sustain_s` seconds (the
    median after the first third), alternating two instances of `make()`. After the rest the clocks sit at
    idle: 0.1 s of calls (discarded) brings them up before the burst is timed, too short for the board's
    power limit to bite. Without it an FP8 8192^3 burst (20 calls, 14 ms) on an H200 caught the clock still
    rising and came out 1/1.485 of the sustained rate (2026-11-28)."""
    calls = [make() for _ in range(2)]

    def rate(count):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(count):
            calls[i % 2]()
        end.record()
        end.synchronize()
        return count / (start.elapsed_time(end) * 1e-3)

    rate(20)
    time.sleep(2.0)
    warm = time.time()
    while time.time() - warm < 0.1:
        rate(5)
    burst = rate(20)
    windows, begin = [], time.time()
    while time.time() - begin < sustain_s:
        windows.append((time.time() - begin, rate(200)))
    sustained = statistics.median(r for t, r in windows if t > sustain_s / 3)
    if sustained > burst * 1.02:
        print(f"# warning: sustained {sustained:.4g}/s above the burst's {burst:.4g}/s: the burst missed the boost clock")
    return burst, sustained


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", action="append", choices=sorted(PRESETS), help="model (repeatable)")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", help="write JSON here")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    torch._functorch.config.donated_buffer = False  # the compiled ops' backward is run repeatedly
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tp": a.tp, "seq": a.seq,
              "ceilings": ceilings(a.reps), "adam": adam(a.reps), "gemm_sweep": gemm_sweep(a.reps), "models": {}}
    c = result["ceilings"]
    print(f"# {result['device']}: copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write), "
          f"8192^3 bf16 GEMM {c['gemm_8192_flops_per_s'] / 1e12:.0f} TFLOP/s in a burst, "
          f"{c['gemm_8192_sustained_flops_per_s'] / 1e12:.0f} sustained, fused Adam "
          f"{result['adam']['bytes_per_s'] / 1e12:.2f} TB/s")
    for p in a.preset or ["22b"]:
        hidden, heads, mb = PRESETS[p]
        rows = run(hidden, heads, mb, a.tp, a.seq, a.reps)
        result["models"][p] = {"hidden": hidden, "heads": heads, "micro_batch": mb, "ops": rows}
        print(f"# {p}: hidden {hidden}, heads {heads}, micro-batch {mb}, tp {a.tp}, seq {a.seq}")
        print(f"{'op':>20} {'fwd_ms':>8} {'bwd_ms':>8} {'TFLOP/s':>8} {'fwd TB/s':>8} {'bwd TB/s':>8}")
        for r in rows:
            t = r["fwd_ms"] if r["fwd_ms"] is not None else r["bwd_ms"]
            tf = f"{r['flops'] / t / 1e9:8.0f}" if r["flops"] else " " * 8
            fb = f"{r['bytes'][0] / r['fwd_ms'] / 1e9:8.2f}" if r["bytes"] else " " * 8
            bb = f"{r['bytes'][1] / r['bwd_ms'] / 1e9:8.2f}" if r["bytes"] else " " * 8
            f_ = f"{r['fwd_ms']:8.3f}" if r["fwd_ms"] is not None else " " * 8
            b_ = f"{r['bwd_ms']:8.3f}" if r["bwd_ms"] is not None else " " * 8
            print(f"{r['op']:>20} {f_} {b_} {tf} {fb} {bb}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
