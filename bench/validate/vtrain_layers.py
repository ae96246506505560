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

Then each (hidden, micro-batch, TP, DP) group, whose runs vary in layers L and in micro-batches nmb a step,
fitted as nmb·(L·a + b) + L·c + d: c is what a step costs once per layer (the optimizer and the gradient
all-reduce), printed at TP 1, measured / Loom, as a range over the groups of each hidden size.
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


def least_squares(rows, ys):
    """x minimising |rows·x − ys|², from the normal equations (Gaussian elimination with pivoting)."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * y for r, y in zip(rows, ys))]
         for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda i: abs(a[i][col]))
        a[col], a[pivot] = a[pivot], a[col]
        if abs(a[col][col]) < 1e-12:
            return None  # the group does not vary in both layers and micro-batches
        for i in range(n):
            if i != col:
                f = a[i][col] / a[col][col]
                a[i] = [x - f * y for x, y in zip(a[i], a[col])]
    return [a[i][n] / a[i][i] for i in range(n)]


def per_step_per_layer(path):
    """c of nmb·(L·a + b) + L·c + d per (hidden, micro-batch, TP 1, DP) group: {hidden: [(measured, loom)]}."""
    groups = defaultdict(list)
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if int(r["pp"]) != 1 or int(r["tp"]) != 1:
                continue
            nmb = int(r["global_batch"]) // (int(r["dp"]) * int(r["micro_batch"]))
            groups[(int(r["hidden"]), int(r["micro_batch"]), int(r["dp"]))].append(
                (nmb, int(r["layers"]), float(r["measured_s"]), float(r["predicted_s"])))
    c = defaultdict(list)
    for (hidden, _, _), runs in groups.items():
        rows = [[n * layers, n, layers, 1.0] for n, layers, _, _ in runs]
        measured = least_squares(rows, [run[2] for run in runs])
        loom = least_squares(rows, [run[3] for run in runs])
        if measured and loom:
            c[hidden].append((1e3 * measured[2], 1e3 * loom[2]))
    return c


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
    for hidden, cs in sorted(per_step_per_layer(path).items()):
        print(f"per layer per step at hidden {hidden}, TP 1 (ms): measured {min(x[0] for x in cs):.2f}-"
              f"{max(x[0] for x in cs):.2f}, Loom {min(x[1] for x in cs):.2f}-{max(x[1] for x in cs):.2f} "
              f"over {len(cs)} groups")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: vtrain_layers.py RESIDUALS.csv (loom calibrate --vtrain ... --check --residuals)")
    main(sys.argv[1])
