#!/usr/bin/env python3
"""Medians and ranges of compare_sparse.sh's rounds, as a markdown table.

usage: summarize_sparse.py OUT_DIR
"""
import glob
import os
import re
import statistics
import sys
from collections import defaultdict


def fmt(values, scale=1e6, digits=2):
    if not values:
        return "-"
    med = statistics.median(values)
    return f"{med / scale:.{digits}f} ({min(values) / scale:.{digits}f}-{max(values) / scale:.{digits}f})"


def main(out):
    ours = defaultdict(lambda: defaultdict(list))  # (dim, shards, workers)
    peer = defaultdict(list)
    for path in glob.glob(os.path.join(out, "ours_r*_s*_d*.md")):
        for line in open(path):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 9 or not cells[0].isdigit() or not cells[3].endswith("M"):
                continue
            key = (int(cells[0]), int(cells[1]), int(cells[2]))
            ours[key]["rows"].append(float(cells[3][:-1]) * 1e6)
            ours[key]["gbps"].append(float(cells[5]))
            if cells[7] != "-":
                ours[key]["dense"].append(float(cells[7]))
                ours[key]["ratio"].append(float(cells[5]) / float(cells[7]))
    for path in glob.glob(os.path.join(out, "peer_r*_s*_d*_w*.txt")):
        m = re.search(r"_s(\d+)_d(\d+)_w(\d+)\.txt$", path)
        shards, dim, workers = map(int, m.groups())
        rows = [float(x) for x in re.findall(r"rows_per_s (\S+)", open(path).read())]
        if len(rows) == workers:
            peer[(dim, shards, workers)].append(sum(rows))
    print("| dim | shards | workers | rows/s, this project | rows/s, ps-lite | "
          "this / ps-lite | sparse GB/s | dense GB/s, same bytes | sparse / dense |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(set(ours) | set(peer)):
        o, p = ours[key], peer[key]
        vs = "-"
        if o["rows"] and p:
            vs = f"{statistics.median(o['rows']) / statistics.median(p):.2f}x"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {fmt(o['rows'])}M | {fmt(p)}M | {vs} | "
              f"{fmt(o['gbps'], 1, 3)} | {fmt(o['dense'], 1, 3)} | {fmt(o['ratio'], 1, 2)} |")


if __name__ == "__main__":
    main(sys.argv[1])
