#!/usr/bin/env python3
"""Medians and ranges of compare_dense.sh's lines, per case and side
(GB/s; steps/s below 64 KB).

usage: summarize_dense.py FILE...  (the lines compare_dense.sh printed)
Prints a markdown table: case, peer GB/s, this project's GB/s (median
(min-max)), the ratio of the medians, and CPU ms per step (medians: all,
then the servers' and the workers' parts).
"""
import statistics
import sys


def main(paths):
    runs = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                w = line.split()
                if len(w) < 13 or w[0] not in ("ours", "peer"):
                    continue
                case = (int(w[4]), int(w[6]), int(w[8]))
                runs.setdefault(case, {"ours": [], "peer": []})[w[0]].append(
                    (float(w[10]), float(w[12]),
                     float(w[14]) if len(w) > 14 else 0.0,
                     float(w[16]) if len(w) > 18 else 0.0,
                     float(w[18]) if len(w) > 18 else 0.0))
    print("| case | peer GB/s | this project GB/s | this / peer "
          "| CPU ms/step: peer / this | of which servers, workers: peer / this |")
    print("|---|---|---|---|---|---|")
    for (s, w, b), sides in sorted(runs.items(), key=lambda kv: (-kv[0][0], kv[0][2])):
        if not sides["ours"] or not sides["peer"]:
            continue
        cell = {}
        # Below 64 KB a step's bytes say little: steps/s instead.
        rate = b < 65536
        for side, v in sides.items():
            g = [x[2] if rate else x[0] for x in v]
            cell[side] = (statistics.median(g), min(g), max(g),
                          statistics.median(x[1] for x in v),
                          statistics.median(x[3] for x in v),
                          statistics.median(x[4] for x in v))
        size = f"{b // 1048576} MB" if b >= 1048576 else f"{b // 1024} KB"
        o, p = cell["ours"], cell["peer"]
        unit = ", steps/s" if rate else ""
        fmt = "{:,.0f}" if rate else "{:.2f}"
        p_cell = f"{fmt.format(p[0])} ({fmt.format(p[1])}-{fmt.format(p[2])})"
        o_cell = f"{fmt.format(o[0])} ({fmt.format(o[1])}-{fmt.format(o[2])})"
        print(f"| {s} x {w}, {size}{unit} | {p_cell} | {o_cell} | {o[0] / p[0]:.2f} "
              f"| {p[3]:.2f} / {o[3]:.2f} "
              f"| {p[4]:.1f}, {p[5]:.1f} / {o[4]:.1f}, {o[5]:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
