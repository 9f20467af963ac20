#!/usr/bin/env bash
# The cost of replicated shards (docs/faults.md): ps_bench against N local
# ps_server processes (one shard each), with every shard unreplicated
# (factor 1) and with one backup on the next server (factor 2), the two
# alternated ROUNDS times in one run. Prints each case's median steps/s per
# factor and the median and range of the per-round ratios.
#
#   tools/replication_bench.sh                 # dense 1, 16 MB; 1, 2 workers
#   MODE=sparse tools/replication_bench.sh     # sparse dim 16, 64
#   ROUNDS=5 SERVERS=2 BIN=bazel-bin tools/replication_bench.sh
#
# Build first: bazel build --config=nocuda //server:ps_server //tools:ps_bench
# On one machine every replica's apply shares its cores: the figure is the
# cost there, bounded by CPU as much as by replication.
set -euo pipefail
BIN=${BIN:-bazel-bin}
ROUNDS=${ROUNDS:-3}
SERVERS=${SERVERS:-2}
MODE=${MODE:-dense}
dir=$(mktemp -d)
cleanup() {
  local pids
  pids=$(jobs -p)
  [[ -n $pids ]] && kill $pids 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
export PS_TOKEN=${PS_TOKEN:-replication-bench}
addresses=()
for ((i = 0; i < SERVERS; i++)); do
  "$BIN/server/ps_server" --port=0 --port_file="$dir/s$i.port" \
    >"$dir/s$i.log" 2>&1 &
done
for ((i = 0; i < SERVERS; i++)); do
  for ((t = 0; t < 100; t++)); do [[ -s $dir/s$i.port ]] && break; sleep 0.1; done
  [[ -s $dir/s$i.port ]] || { echo "ps_server $i did not start" >&2; exit 1; }
  addresses+=("127.0.0.1:$(tr -d '[:space:]' <"$dir/s$i.port")")
done
servers=$(IFS=,; echo "${addresses[*]}")
if [[ $MODE == sparse ]]; then
  cases=(--mode sparse --sparse_dims 16,64 --workers 1)
  col=5 unit="rows/s"  # rows/s (push+pull)
else
  cases=(--sizes 1M,16M --workers 1,2 --worker_processes)
  col=8 unit="steps/s"
fi
for ((r = 1; r <= ROUNDS; r++)); do
  for f in 1 2; do
    "$BIN/tools/ps_bench" --servers "$servers" --replication "$f" \
      --ceilings=false --seconds_per_case 1.5 "${cases[@]}" 2>/dev/null |
      awk -F'|' -v f="$f" -v r="$r" -v col="$col" '/^\| [0-9]/ {
        gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $4)
        v = $col; gsub(/ /, "", v); x = v + 0
        if (v ~ /M$/) x *= 1e6; else if (v ~ /K$/) x *= 1e3
        print $2 "/" $3 "shards/" $4 "workers", f, r, x }' >>"$dir/results"
  done
done
echo "# replication cost: $SERVERS ps_servers, $ROUNDS alternated rounds ($MODE)"
echo "| case | $unit factor 1 (median) | factor 2 (median) | ratio median | ratio range |"
echo "|---|---|---|---|---|"
awk '
  { v[$1, $2, $3] = $4; cases[$1] = 1; rounds[$3] = 1 }
  function median(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
      if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    for (c in cases) {
      n = 0; delete one; delete two; delete ratio
      for (r in rounds) {
        if (!((c, 1, r) in v) || !((c, 2, r) in v)) continue
        n++; one[n] = v[c, 1, r]; two[n] = v[c, 2, r]; ratio[n] = v[c, 2, r] / v[c, 1, r]
      }
      if (!n) continue
      lo = hi = ratio[1]
      for (i = 2; i <= n; i++) { if (ratio[i] < lo) lo = ratio[i]; if (ratio[i] > hi) hi = ratio[i] }
      printf "| %s | %.0f | %.0f | %.2f | %.2f-%.2f |\n", c, median(one, n), median(two, n), median(ratio, n), lo, hi
    }
  }' "$dir/results" | sort
