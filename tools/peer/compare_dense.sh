#!/usr/bin/env bash
# Dense push+pull, this project against ps-lite, alternated on one machine
# (docs/performance/ps-bench.md). Each round, for each case: `ps_bench`
# against SHARDS fresh ps_server processes with WORKERS worker processes,
# then ps-lite's dense driver (run_ps_lite.sh) with as many servers and
# workers. MODE fused (default): ps_bench's default step (the pushes and the
# end of step answered with the weights: one round trip) against the peer's
# ZPushPull; MODE split: `ps_bench --fused=false` against ZPush, Wait, ZPull,
# Wait. Prints one line per run: "SIDE round R shards S workers W bytes B
# gbps G cpu_ms_per_step C steps_per_s N server_ms SV worker_ms WK"
# (steps/s: all workers'; CPU: the servers' and workers' user+system time
# over the run, the peer's scheduler included, over all workers' steps;
# then the servers' and the workers' parts of it. This project's workers
# are counted over the measured window, the peer's over their whole run).
#
# usage: compare_dense.sh PS_BENCH PS_SERVER PS_LITE_DENSE_BENCH ROUNDS \
#          SECONDS OUT_DIR [CASES [MODE]]
# CASES: space-separated SHARDSxWORKERSxBYTES, default
#   "2x2x1048576 2x2x16777216 1x1x1048576 1x1x16777216".
set -euo pipefail
PS_BENCH=$1 PS_SERVER=$2 PEER=$3 ROUNDS=$4 SECONDS_PER_CASE=$5
OUT=$(mkdir -p "$6" && cd "$6" && pwd)
CASES=${7:-2x2x1048576 2x2x16777216 1x1x1048576 1x1x16777216}
MODE=${8:-fused}
HERE=$(cd "$(dirname "$0")" && pwd)
case $MODE in
  fused) OURS_FLAG=--fused=true PEER_FUSED=1 ;;
  split) OURS_FLAG=--fused=false PEER_FUSED=0 ;;
  *) echo "MODE must be fused or split" >&2; exit 2 ;;
esac
# start_servers, stop_servers, OUT/token.
source "$HERE/ps_servers.sh"
# CPU seconds (user+system) of the processes in "$@".
cpu_of() {
  local p t=0
  for p in "$@"; do
    t=$(awk -v t="$t" '{print t + ($14 + $15) / 100}' "/proc/$p/stat" 2>/dev/null || echo "$t")
  done
  echo "$t"
}
for ((r = 1; r <= ROUNDS; r++)); do
  for c in $CASES; do
    IFS=x read -r S W B <<<"$c"
    start_servers "$S"
    c0=$(cpu_of "${pids[@]}")
    "$PS_BENCH" --servers="$servers" --token_file="$OUT/token" \
      --workers="$W" --worker_processes --sizes="$((B / 1024))K" $OURS_FLAG \
      --seconds_per_case="$SECONDS_PER_CASE" --out="$OUT/ours_r${r}_$c.md" >/dev/null
    c1=$(cpu_of "${pids[@]}")
    stop_servers
    # The table row: | model | shards | workers | GB/s | ... | steps/s | worker CPU ms/step |
    awk -F'|' -v r="$r" -v s="$S" -v w="$W" -v b="$B" -v srv="$(echo "$c1 - $c0" | bc)" \
      -v t="$SECONDS_PER_CASE" '$3 ~ /^ *[0-9]+ *$/ && $4 ~ /^ *[0-9]+ *$/ {
        steps = $8 * t; printf "ours round %d shards %d workers %d bytes %d gbps %.3f cpu_ms_per_step %.2f steps_per_s %.1f server_ms %.2f worker_ms %.2f\n",
        r, s, w, b, $5, $9 + 1000 * srv / steps, $8, 1000 * srv / steps, $9 }' "$OUT/ours_r${r}_$c.md"
    BENCH_FUSED=$PEER_FUSED BENCH_KEYS=$S timeout 120 "$HERE/run_ps_lite.sh" "$PEER" "$S" "$W" "$B" \
      "$SECONDS_PER_CASE" >"$OUT/peer_r${r}_$c.txt" 2>/dev/null || true
    awk -v r="$r" -v s="$S" -v w="$W" -v b="$B" '
      /^worker/ { g += $10; steps += $6; rate += $12 }
      /^process/ { cpu += $4; if ($2 == "server") srv += $4; if ($2 == "worker") wrk += $4 }
      END { printf "peer round %d shards %d workers %d bytes %d gbps %.3f cpu_ms_per_step %.2f steps_per_s %.1f server_ms %.2f worker_ms %.2f\n",
        r, s, w, b, g, steps ? 1000 * cpu / steps : 0, rate, steps ? 1000 * srv / steps : 0, steps ? 1000 * wrk / steps : 0 }' "$OUT/peer_r${r}_$c.txt"
  done
done
