#!/usr/bin/env bash
# Sparse push+pull, this project against ps-lite, alternated on one machine
# (docs/performance/sparse-tables.md). Each round, for 1 and 2
# shards and dims 16 and 64: `ps_bench --mode=sparse` against SHARDS fresh
# ps_server processes with 1-4 worker processes (each case followed by the
# dense path on the same bytes per step), then ps-lite's sparse driver
# (run_ps_lite_sparse.sh) with SHARDS servers and 1-4 workers on the same
# key stream. Figures land in OUT_DIR; summarize_sparse.py gives medians and
# ranges over the rounds.
#
# usage: compare_sparse.sh PS_BENCH PS_SERVER PS_LITE_SPARSE_BENCH ROUNDS SECONDS OUT_DIR \
#          [SHARDS [DIMS [WORKERS]]]
# SHARDS, DIMS and WORKERS are space-separated lists (default "1 2", "16 64",
# "1 2 3 4"): e.g. "1" "64" "3 4" runs only those cases.
set -euo pipefail
PS_BENCH=$1 PS_SERVER=$2 PEER=$3 ROUNDS=$4 SECONDS_PER_CASE=$5
OUT=$(mkdir -p "$6" && cd "$6" && pwd)
SHARDS_LIST=${7:-1 2} DIMS=${8:-16 64} WORKERS=${9:-1 2 3 4}
HERE=$(cd "$(dirname "$0")" && pwd)
# start_servers, stop_servers, OUT/token.
source "$HERE/ps_servers.sh"
for ((r = 1; r <= ROUNDS; r++)); do
  for shards in $SHARDS_LIST; do
    for dim in $DIMS; do
      start_servers "$shards"
      "$PS_BENCH" --mode=sparse --servers="$servers" --token_file="$OUT/token" \
        --sparse_dims="$dim" --workers="${WORKERS// /,}" --worker_processes \
        --seconds_per_case="$SECONDS_PER_CASE" --out="$OUT/ours_r${r}_s${shards}_d$dim.md" \
        >/dev/null || true
      stop_servers
      for w in $WORKERS; do
        "$HERE/run_ps_lite_sparse.sh" "$PEER" "$shards" "$w" "$dim" "$SECONDS_PER_CASE" \
          >"$OUT/peer_r${r}_s${shards}_d${dim}_w$w.txt" 2>/dev/null || true
      done
      echo "round $r, $shards shard(s), dim $dim: done" >&2
    done
  done
done
