#!/usr/bin/env python3
"""Set the ops of a Megatron-LM layer timed on a GPU (megatron_layer_ops.py) against what
`loom sim` predicts for them with a cost file, op by op.

  python3 bench/gpu/compare_layer_ops.py --ops ops.json --cluster dgx-h100 [--loom build/cli/loom]
  python3 bench/gpu/compare_layer_ops.py --ops ops.json --fit --peak 989.4e12 --bandwidth 3.35e12

--fit prints what a cost file's compute section takes from the measurement instead (with --check
COST_FILE, exits 1 unless the file holds those figures; --ops-only checks only its op efficiencies): the GEMM
efficiency curve (ceiling and half-saturation size, least squares in log time over the sweep and
the layers' forward and input-gradient GEMMs) and each memory-bound op's fraction of the
datasheet bandwidth (median over the models), with the copy and fused-Adam fractions.

For each model the layer is simulated with two layers, tp 8, sequence parallel, unfused attention,
fp32 main grads and no recompute, and every compute slice of `loom sim --trace` is divided by the
layer count; communication is left out (one GPU measured none)."""
import argparse
import collections
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

# measured op (megatron_layer_ops.py) → the simulator's slice names, and how many per layer.
NAMES = {
    "layer_norm": ("norm", "norm_bwd", 2),
    "qkv": ("qkv", None, 1), "qkv dgrad": (None, "qkv_bwd#0", 1), "qkv wgrad": (None, "qkv_bwd#1", 1),
    "qk": ("qk", "qk_bwd", 1),
    "softmax": ("softmax", "softmax_bwd", 1),
    "attn_dropout": ("attn_dropout", "attn_dropout_bwd", 1),
    "av": ("av", "av_bwd", 1),
    "attn_out": ("attn_out", None, 1), "attn_out dgrad": (None, "attn_out_bwd#0", 1),
    "attn_out wgrad": (None, "attn_out_bwd#1", 1),
    "bias_dropout_add": ("residual", "dropout_bwd", 2),
    "mlp_up": ("mlp_up", None, 1), "mlp_up dgrad": (None, "mlp_up_bwd#0", 1), "mlp_up wgrad": (None, "mlp_up_bwd#1", 1),
    "bias_gelu": ("gelu", "gelu_bwd", 1),
    "mlp_down": ("mlp_down", None, 1), "mlp_down dgrad": (None, "mlp_down_bwd#0", 1),
    "mlp_down wgrad": (None, "mlp_down_bwd#1", 1),
}
LAYERS = 2


def simulate(loom, cluster, model, micro_batch, tp, seq):
    with tempfile.TemporaryDirectory() as d:
        spec = dict(model, layers=LAYERS, kv_heads=model["heads"], ffn_hidden=4 * model["hidden"], vocab=51200,
                    seq_len=seq, name="layer")
        with open(os.path.join(d, "m.json"), "w") as f:
            json.dump(spec, f)
        trace = os.path.join(d, "t.json")
        subprocess.run([loom, "sim", "--model", os.path.join(d, "m.json"), "--cluster", cluster, "--gpus", str(tp),
                        "--global-batch", str(micro_batch), "--tp", str(tp), "--pp", "1", "--micro-batch",
                        str(micro_batch), "--recompute", "none", "--sp", "on", "--attention", "unfused",
                        "--grad-bytes", "4", "--trace", trace], check=True, stdout=subprocess.DEVNULL)
        events = json.load(open(trace))["traceEvents"]
    # Per name, the slices in time order; '#i' picks the i-th of each layer's (dgrad, wgrad) pair.
    seen = collections.defaultdict(list)
    for e in sorted((e for e in events if e.get("ph") == "X" and e.get("tid") == 0), key=lambda e: e["ts"]):
        seen[e["name"]].append(e["dur"] / 1e3)
    return seen


def predicted(seen, name, per_layer):
    """Milliseconds of one such op: the slices of `name` over the layers, per op of the layer."""
    if name is None:
        return None
    base, _, index = name.partition("#")
    slices = seen.get(base, [])
    if index:
        slices = slices[int(index)::2]
    return sum(slices) / LAYERS / per_layer if slices else None


def fit_curve(points, peak, launch):
    """(ceiling, half-saturation) of t = launch + (w + half) / (peak · ceiling), least squares in
    log time over (FLOPs, seconds) points: a coarse grid, then a fine one around its best."""
    def sq_error(e, h):
        return sum(math.log((launch + (f + h) / (peak * e)) / t) ** 2 for f, t in points)

    # ceiling 0.20 .. 0.90 by 0.01, half-saturation 1e7 .. 1e12 FLOP by 10^(1/16)
    _, e0, x0 = min((sq_error(0.20 + 0.01 * i, 10 ** (7 + j / 16)), 0.20 + 0.01 * i, 7 + j / 16)
                    for i in range(71) for j in range(81))
    # then by 0.001 and 10^(1/80) within one coarse step
    _, e, x = min((sq_error(e0 + 0.001 * i, 10 ** (x0 + j / 80)), e0 + 0.001 * i, x0 + j / 80)
                  for i in range(-10, 11) for j in range(-5, 6))
    h = 10 ** x
    errors = [(launch + (f + h) / (peak * e)) / t - 1 for f, t in points]
    return e, h, errors


# flash_attention.py's backends → the cost file's figures: the default (cuDNN's fused attention on these
# GPUs, as TransformerEngine and PyTorch >= 2.9 pick it) and PyTorch's FLASH_ATTENTION backend, which runs
# FlashAttention-2's kernels (PyTorch 2.2 release notes).
FLASH_BACKENDS = {"default": "flash_attention", "flash": "fa2_attention"}


def fit_flash(flash, peak, launch):
    """Fused attention: per backend, the curve over one layer's attention FLOPs (forward + backward)
    from flash_attention.py, lowered by that run's sustained/burst GEMM ratio."""
    c = flash["ceilings"]
    factor = c["gemm_8192_sustained_flops_per_s"] / c["gemm_8192_flops_per_s"]
    figures = {}
    for backend, prefix in FLASH_BACKENDS.items():
        # flash_attention.py --long's rows check the curve's extrapolation; they are not fitted.
        points = [(r["loom_flops"], r["fwd_bwd_ms"] * 1e-3) for r in flash["attention"]
                  if r["backend"] == backend and not r.get("long")]
        if not points:
            continue
        e, h, errors = fit_curve(points, peak, launch)
        print(f"{backend} attention ({len(points)} shapes, errors {min(errors) * 100:+.0f} .. {max(errors) * 100:+.0f} %): "
              f"ceiling {e:.3f} in bursts x sustained {factor:.3f}: {prefix}_efficiency {e * factor:.3f}, "
              f"{prefix}_half_saturation_flops {h:.3g}")
        figures[f"{prefix}_efficiency"] = e * factor
        figures[f"{prefix}_half_saturation_flops"] = h
    return figures


def fit(measured, peak, bandwidth, launch):
    """The compute figures of a cost file, from one measurement: {name: value}, printed."""
    points = [(2.0 * p["m"] * p["n"] * p["k"], p["ms"] * 1e-3) for p in measured.get("gemm_sweep", [])]
    for m in measured["models"].values():
        for r in m["ops"]:
            if r["flops"] and r["op"] not in ("qk", "av") and not r["op"].endswith("wgrad"):
                points.append((r["flops"], (r["fwd_ms"] or r["bwd_ms"]) * 1e-3))
    e, h, errors = fit_curve(points, peak, launch)
    errors = [abs(x) for x in errors]
    print(f"GEMMs timed in bursts: ceiling {e:.3f}, gemm_half_saturation_flops {h:.3g} "
          f"({len(points)} GEMMs, mean |error| {100 * statistics.mean(errors):.1f} %, max {100 * max(errors):.1f} %)")
    figures = {"gemm_half_saturation_flops": h}
    c = measured["ceilings"]
    if "gemm_8192_sustained_flops_per_s" in c:
        factor = c["gemm_8192_sustained_flops_per_s"] / c["gemm_8192_flops_per_s"]
        print(f"sustained / burst GEMM rate {factor:.3f} ({c['sustain_s']:.0f} s of 8192^3): "
              f"gemm_max_efficiency {e * factor:.3f}")
        figures["gemm_max_efficiency"] = e * factor
    figures["memory_bound_efficiency"] = c["copy_bytes_per_s"] / bandwidth
    print(f"copy: {figures['memory_bound_efficiency']:.3f} of the datasheet bandwidth")
    ops = {}
    if "adam" in measured:
        ops["optimizer"] = measured["adam"]["bytes_per_s"] / bandwidth
        print(f"optimizer (fused Adam): {ops['optimizer']:.3f}")
    fractions = collections.defaultdict(list)
    for m in measured["models"].values():
        for r in m["ops"]:
            if not r["bytes"]:
                continue
            fwd_name, bwd_name, _ = NAMES[r["op"]]
            fractions[fwd_name].append(r["bytes"][0] / (r["fwd_ms"] * 1e-3) / bandwidth)
            fractions[bwd_name].append(r["bytes"][1] / (r["bwd_ms"] * 1e-3) / bandwidth)
    for name, v in fractions.items():
        ops[name] = statistics.median(v)
        print(f"{name}: {ops[name]:.3f} (models {min(v):.3f}-{max(v):.3f})")
    figures["memory_op_efficiency"] = ops
    return figures


def check(figures, cost_file, ops_only):
    """Every measured figure the cost file holds is the measurement's, to the digits written."""
    compute = json.load(open(cost_file))["compute"]
    wrong = []

    def near(name, have, want, rel):
        if abs(have - want) > rel * abs(want):
            wrong.append(f"{name}: cost file {have:.4g}, measurement {want:.4g}")

    if not ops_only:
        near("gemm_max_efficiency", compute["gemm_max_efficiency"], figures["gemm_max_efficiency"], 0.005)
        near("gemm_half_saturation_flops", compute["gemm_half_saturation_flops"], figures["gemm_half_saturation_flops"], 0.05)
        near("memory_bound_efficiency", compute["memory_bound_efficiency"], figures["memory_bound_efficiency"], 0.015)
        for name in [f"{p}_{x}" for p in FLASH_BACKENDS.values() for x in ("efficiency", "half_saturation_flops")]:
            if name in figures:
                near(name, compute.get(name, 0.0), figures[name], 0.005 if name.endswith("efficiency") else 0.05)
    held = compute.get("memory_op_efficiency", {})
    if not held:
        wrong.append("the cost file has no memory_op_efficiency")
    for op, value in held.items():
        if op not in figures["memory_op_efficiency"]:
            wrong.append(f"memory_op_efficiency.{op}: not measured")
        else:
            near(f"memory_op_efficiency.{op}", value, figures["memory_op_efficiency"][op], 0.01)
    for line in wrong:
        print(f"{cost_file}: {line}", file=sys.stderr)
    print(f"{cost_file}: {'MISMATCH' if wrong else 'every measured figure matches'}")
    return 1 if wrong else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", required=True)
    ap.add_argument("--cluster", default="dgx-h100")
    ap.add_argument("--loom", default="build/cli/loom")
    ap.add_argument("--layer", help="JSON from megatron_layer_step.py: the whole layer run back to back")
    ap.add_argument("--fit", action="store_true", help="fit the cost file's compute figures instead")
    ap.add_argument("--peak", type=float, default=989.4e12, help="datasheet FLOP/s (for --fit)")
    ap.add_argument("--bandwidth", type=float, default=3.35e12, help="datasheet bytes/s (for --fit)")
    ap.add_argument("--launch", type=float, default=3e-6, help="fixed seconds per kernel (for --fit)")
    ap.add_argument("--flash", help="with --fit: flash_attention.py's JSON, for the fused-attention figures")
    ap.add_argument("--check", metavar="COST_FILE", help="with --fit: fail unless the cost file holds these figures")
    ap.add_argument("--ops-only", action="store_true", help="with --check: only its memory_op_efficiency entries")
    a = ap.parse_args()
    measured = json.load(open(a.ops))
    if a.fit:
        figures = fit(measured, a.peak, a.bandwidth, a.launch)
        if a.flash:
            figures.update(fit_flash(json.load(open(a.flash)), a.peak, a.launch))
        return check(figures, a.check, a.ops_only) if a.check else 0
    tp, seq = measured["tp"], measured["seq"]
    layers = json.load(open(a.layer))["models"] if a.layer else {}
    for model, m in measured["models"].items():
        seen = simulate(a.loom, a.cluster, {"hidden": m["hidden"], "heads": m["heads"]}, m["micro_batch"], tp, seq)
        print(f"# {model} on {a.cluster} (measured on {measured['device']}); ms per op per layer")
        print(f"{'op':>18} {'fwd meas':>9} {'fwd loom':>9} {'bwd meas':>9} {'bwd loom':>9}")
        totals = [0.0, 0.0, 0.0, 0.0]
        for r in m["ops"]:
            fwd_name, bwd_name, count = NAMES[r["op"]]
            pf, pb = predicted(seen, fwd_name, count), predicted(seen, bwd_name, count)
            cells = []
            for i, (meas, pred) in enumerate(((r["fwd_ms"], pf), (r["bwd_ms"], pb))):
                if meas is None or pred is None:
                    cells += [" " * 9, " " * 9]
                    continue
                totals[2 * i] += meas * NAMES[r["op"]][2]
                totals[2 * i + 1] += pred * NAMES[r["op"]][2]
                cells += [f"{meas:9.3f}", f"{pred:9.3f}"]
            print(f"{r['op']:>18} " + " ".join(cells))
        print(f"{'layer (sum)':>18} {totals[0]:9.3f} {totals[1]:9.3f} {totals[2]:9.3f} {totals[3]:9.3f}"
              f"   loom/measured {(totals[1] + totals[3]) / (totals[0] + totals[2]):.3f}")
        if model in layers:
            whole = layers[model]
            print(f"{'layer (whole)':>18} {whole['fwd_ms']:9.3f} {totals[1]:9.3f} {whole['fwd_bwd_ms'] - whole['fwd_ms']:9.3f} "
                  f"{totals[3]:9.3f}   loom/measured {(totals[1] + totals[3]) / whole['fwd_bwd_ms']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
