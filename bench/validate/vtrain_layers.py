#!/usr/bin/env python3
"""vTrain's single-node runs, layer by layer: the README's per-layer table and intercept ratio.

    build/cli/loom calibrate --vtrain ../shared/validation/vtrain_single_node.csv --check --residuals r.csv
    python3 bench/validate/vtrain_layers.py r.csv

The runs differ only in their layer count within each (hidden, micro-batch, TP, DP, global batch) group
of pipeline-free runs, so a straight line through each group's time per micro-batch against layers
separates the per-layer cost (its slope: forward, recompute and backward of one layer for one
micro-batch) from the rest (its intercept: embedding, head, loss and the step's fixed costs spread over
its micro-batches). Prints, per (hidden, micro-batch) row and TP column, the median slope over the groups
in ms, measured / Loom, then the intercepts' measured / Loom ratio over all groups.
"""
import csv
import statistics
import sys
from collections import defaultdict


def line(xs, ys):
    """Least-squares slope and intercept."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


def main(path):
    groups = defaultdict(list)
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if int(r["pp"]) != 1:
                continue
            micro_batches = int(r["global_batch"]) // (int(r["dp"]) * int(r["micro_batch"]))
            key = (int(r["hidden"]), int(r["micro_batch"]), int(r["tp"]), int(r["dp"]), int(r["global_batch"]))
            groups[key].append(
                (int(r["layers"]), float(r["measured_s"]) / micro_batches, float(r["predicted_s"]) / micro_batches))
    slopes = defaultdict(list)
    intercepts = []
    for (hidden, mb, tp, _, _), runs in groups.items():
        layers = [run[0] for run in runs]
        if len(set(layers)) < 2:
            continue
        measured = line(layers, [run[1] for run in runs])
        loom = line(layers, [run[2] for run in runs])
        slopes[(hidden, mb, tp)].append((1e3 * measured[0], 1e3 * loom[0]))
        intercepts.append(measured[1] / loom[1])
    tps = sorted({tp for (_, _, tp) in slopes})
    print("| hidden | micro-batch | " + " | ".join(f"TP {tp}" for tp in tps) + " |")
    print("|---|---:|" + "---:|" * len(tps))
    for hidden, mb in sorted({(h, m) for (h, m, _) in slopes}):
        cells = []
        for tp in tps:
            s = slopes.get((hidden, mb, tp))
            cells.append(f"{statistics.median(x[0] for x in s):.2f} / {statistics.median(x[1] for x in s):.2f}"
                         if s else "")
        print(f"| {hidden} | {mb} | " + " | ".join(cells) + " |")
    print(f"intercepts, measured / Loom: median {statistics.median(intercepts):.2f} "
          f"({min(intercepts):.2f}-{max(intercepts):.2f}) over {len(intercepts)} groups")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: vtrain_layers.py RESIDUALS.csv (loom calibrate --vtrain ... --check --residuals)")
    main(sys.argv[1])
