#!/usr/bin/env bash
# Where a sparse step's CPU goes, end to end (docs/performance/
# sparse-tables.md): SHARDS fresh ps_server processes and `ps_bench
# --mode=sparse` with WORKERS worker processes at DIM (a 10-second case);
# after the workers have warmed up, `perf record -a -g` for 3 seconds and
# each process's CPU time from /proc over the same window; then split_sparse_profile.py gives
# each side's CPU per row (rows counted once per step, as ps_bench does)
# and its samples by category (worker: key drawing, unique keys, codec,
# gRPC, kernel; shard: gRPC, decode, ForRows lookup, optimizer, answer
# copy, kernel).
#
# usage: profile_sparse.sh PS_BENCH PS_SERVER SHARDS WORKERS DIM OUT_DIR
# Needs perf (linux-perf) and the rights to record every CPU (root, or
# kernel.perf_event_paranoid <= -1).
set -euo pipefail
PS_BENCH=$1 PS_SERVER=$2 SHARDS=$3 WORKERS=$4 DIM=$5
OUT=$(mkdir -p "$6" && cd "$6" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
umask 077
head -c 24 /dev/urandom | base64 >"$OUT/token"
servers=()
stop() {
  local p
  for p in "${servers[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
}
trap stop EXIT
addrs=()
for ((i = 0; i < SHARDS; i++)); do
  rm -f "$OUT/port$i"
  "$PS_SERVER" --port=0 --port_file="$OUT/port$i" --token_file="$OUT/token" \
    >"$OUT/ps_server$i.log" 2>&1 &
  servers+=($!)
done
for ((i = 0; i < SHARDS; i++)); do
  for _ in $(seq 200); do [[ -s $OUT/port$i ]] && break; sleep 0.1; done
  addrs+=("127.0.0.1:$(tr -d '[:space:]' <"$OUT/port$i")")
done
"$PS_BENCH" --mode=sparse --servers="$(IFS=,; echo "${addrs[*]}")" \
  --token_file="$OUT/token" --sparse_dims="$DIM" --workers="$WORKERS" \
  --worker_processes --seconds_per_case=10 --out="$OUT/bench.md" >"$OUT/bench.log" 2>&1 &
bench=$!
sleep 3  # set-up and warm-up
workers=$(pgrep -P "$bench" | tr '\n' ' ')
cpu() {
  local p
  for p in "${servers[@]}" $workers; do
    [[ -r /proc/$p/stat ]] && echo "$p $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null)"
  done
  return 0
}
cpu >"$OUT/cpu_start"
t0=$(date +%s.%N)
perf record -a -g -o "$OUT/perf.data" -- sleep 3 >"$OUT/perf.log" 2>&1
t1=$(date +%s.%N)
cpu >"$OUT/cpu_end"
wait "$bench"
echo "${servers[*]}" >"$OUT/server_pids"
echo "$workers" >"$OUT/worker_pids"
echo "$t0 $t1" >"$OUT/window"
grep "^| $DIM " "$OUT/bench.md"
"$HERE/split_sparse_profile.py" "$OUT"
