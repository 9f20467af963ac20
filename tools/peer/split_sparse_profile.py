#!/usr/bin/env python3
"""profile_sparse.sh's profile, split by process and category.

usage: split_sparse_profile.py OUT_DIR

Reads OUT_DIR/perf.data (perf record -a -g), the shard and worker process
ids, their CPU times at the window's start and end, and ps_bench's report;
prints each side's CPU per row (rows counted once per step) and its samples
by category. A sample counts for the category of its innermost frame; one in
libc or libstdc++ (memcpy, malloc) counts for the innermost caller in
ps_server or ps_bench, so that a row copy is charged to what copies it.
"""
import collections
import os
import re
import subprocess
import sys

SHARD = [  # (category, pattern on our innermost frame)
    ("ForRows lookup: index, record, grouping",
     r"SparseRowMap::(ForRows|Group|PrefetchRecord)|raw_hash_set.*find"),
    ("new rows: insert, initializer",
     r"SparseRowMap::(NewRow|AddPage)|prepare_insert|resize|Initialize|InitRow|"
     r"CreateRow|InitSlots"),
    ("optimizer apply", r"SparseOptimizer::Apply|ApplyNow"),
    ("pull answer: row copy", r"SparseTable::Pull"),
    ("push checks, gradient (Prepare)",
     r"CheckSparseRows|SparseTable::Prepare|PrepareTables|AllFinite|CheckKeysHere"),
    ("request decode", r"Decode|ViewsOf|ReadSparse|ReadVarint"),
    ("answer encode", r"Encode|Serialize|AllocateSlice|PutVarint"),
]
WORKER = [
    ("key drawing (the benchmark's Zipf sampler)",
     r"Zipf|ZipfKeyBatches|SplitMix"),
    ("unique keys by shard", r"Dedup|UniqueKeys|KeyShard|raw_hash_set|hash_set"),
    ("codec encode", r"Encode|PutVarint|AllocateSlice|Request"),
    ("codec decode, rows into the caller's buffer",
     r"Decode|Scatter|ReadSparse|ReadVarint|Widen|Rows"),
]
LIBC = ("libc.so.6", "libstdc++.so.6.0.30", "libm.so.6", "ld-linux-x86-64.so.2")
LIBS = r"grpc|gpr|protobuf|absl|ssl|crypto|libz\.|cares|upb|address_sorting|re2"


def samples(data):
    """(pid, [(symbol, dso basename), innermost first]) per sample."""
    text = subprocess.run(
        ["perf", "script", "-i", data, "-F", "pid,ip,sym,dso"],
        capture_output=True, text=True, check=True).stdout
    cur = None
    for line in text.split("\n"):
        head = re.match(r"^\s*(\d+)\s*$", line)
        frame = re.match(r"^\s*[0-9a-f]+\s+(.*)\s+\((.*)\)$", line)
        if head:
            if cur:
                yield cur
            cur = (head.group(1), [])
        elif frame and cur is not None:
            cur[1].append((frame.group(1), os.path.basename(frame.group(2))))
    if cur:
        yield cur


def kernel_category(chain):
    if re.search(r"sendmsg|recvmsg|tcp_|sock_|inet_|skb", chain):
        return "kernel: TCP send and receive"
    if re.search(r"futex|schedule|epoll|poll|nanosleep|switch", chain):
        return "kernel: wake-ups, sleeps (futex, epoll)"
    if re.search(r"page_fault|exc_page|mmap|munmap|brk|madvise|khugepaged", chain):
        return "kernel: page faults, mappings"
    return "kernel: other"


def classify(frames, binary, table):
    if not frames:
        return "unknown"
    sym, dso = frames[0]
    chain = " ".join(s for s, _ in frames)
    if "kernel" in dso:
        return kernel_category(chain)
    if dso == "libm.so.6" and binary == "ps_bench":
        return table[0][0]  # the Zipf sampler's log and exp
    if dso == binary or dso in LIBC:
        ours = next((s for s, d in frames if d == binary), sym)
        for name, pattern in table:
            if re.search(pattern, ours):
                return name
        return "other, this project's code" + (" (libc)" if dso in LIBC else "")
    if re.search(LIBS, dso):
        return "gRPC, protobuf, Abseil libraries"
    return "other: " + dso


def cpu_seconds(path):
    out = {}
    for line in open(path):
        fields = line.split()
        if len(fields) == 2:  # (a process gone before it was read: none)
            out[fields[0]] = float(fields[1]) / os.sysconf("SC_CLK_TCK")
    return out


def main(out):
    shard_pids = open(os.path.join(out, "server_pids")).read().split()
    worker_pids = open(os.path.join(out, "worker_pids")).read().split()
    t0, t1 = map(float, open(os.path.join(out, "window")).read().split())
    start, end = cpu_seconds(os.path.join(out, "cpu_start")), cpu_seconds(
        os.path.join(out, "cpu_end"))
    rows_per_s = None
    for line in open(os.path.join(out, "bench.md")):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0].isdigit() and cells[3].endswith("M"):
            rows_per_s = float(cells[3][:-1]) * 1e6
    counts = {"shard": collections.Counter(), "worker": collections.Counter()}
    for pid, frames in samples(os.path.join(out, "perf.data")):
        if pid in shard_pids:
            counts["shard"][classify(frames, "ps_server", SHARD)] += 1
        elif pid in worker_pids:
            counts["worker"][classify(frames, "ps_bench", WORKER)] += 1
    window = t1 - t0
    for side, pids in (("shard", shard_pids), ("worker", worker_pids)):
        cpu = sum(end[p] - start[p] for p in pids if p in end and p in start)
        per_row = cpu / window / rows_per_s * 1e9 if rows_per_s else float("nan")
        n = sum(counts[side].values())
        print(f"{side} processes: {cpu:.2f} s CPU in {window:.2f} s "
              f"({per_row:.0f} ns a row at {rows_per_s / 1e6:.2f} M rows/s, "
              f"perf running); {n} samples")
        for name, k in counts[side].most_common():
            if k / n >= 0.005:
                print(f"  {100 * k / n:5.1f}%  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
