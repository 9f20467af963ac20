#!/usr/bin/env bash
# A shard's death at replication factor 1 (a job-wide rollback) against
# factor 2 (a failover) (docs/performance/replicas.md): the same BSP MLP on
# Fashion-MNIST (3 ps_servers, 2 CPU workers, STEPS steps, checkpoints
# every CHECKPOINT_EVERY versions) without a fault and with server-1 killed
# with SIGKILL at step KILL_AT (psctl restarts it), each on a fresh local
# cluster,
# the four cases alternated ROUNDS times. Prints each run's wall time from
# submit to SUCCEEDED, its final test accuracy and its rollback and
# failover events, then the median wall time of each case.
#
#   ROUNDS=3 tools/chaos_bench.sh
#   BIN=bazel-bin STEPS=900 KILL_AT=300 CHECKPOINT_EVERY=50 ...
#
# Build first: bazel build --config=nocuda //server:ps_server
#   //server/coordinator //worker:ps_worker //tools/psctl
set -euo pipefail
BIN=$(realpath "${BIN:-bazel-bin}")
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-900}
KILL_AT=${KILL_AT:-300}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-50}
dir=$(mktemp -d)
run="$dir/cluster"
psctl() { "$BIN/tools/psctl/psctl" --run_dir "$run" --timeout 20 "$@"; }
cleanup() { psctl cluster down >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
step_of() { psctl status "$1" 2>/dev/null | awk '$1 == "progress" { split($3, a, "/"); print a[1] }' || true; }
state_of() { psctl status "$1" 2>/dev/null | awk '$1 == "state" { sub(":", "", $2); print $2 }' || true; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
: >"$dir/times"
for ((r = 1; r <= ROUNDS; r++)); do
  for factor in 1 2; do
    for fault in none kill; do
      rm -rf "$run"
      psctl cluster up --restart on-failure --servers 3 --workers 2 --device cpu \
        --bin_dir "$BIN" --coordinator_flag=--heartbeat_interval_ms=200 \
        --worker_flag=--report_every_steps=10 \
        --worker_flag=--server_retry_s=60 >/dev/null
      cat >"$dir/job.pbtxt" <<EOT
name: "chaos-f$factor-$fault"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer { kind: ADAM learning_rate: 0.002 }
consistency { model: BSP heartbeat_timeout_ms: 30000 }
data { batch_size: 64 max_steps: $STEPS eval_every_steps: $STEPS eval_examples: 2000 }
checkpoint { every_versions: $CHECKPOINT_EVERY }
replication { factor: $factor }
num_workers: 2
seed: 11
EOT
      t0=$(now_ms)
      job=$(psctl submit "$dir/job.pbtxt" | head -n1)
      if [[ $fault == kill ]]; then
        for ((i = 0; i < 1200; i++)); do
          s=$(step_of "$job"); [[ -n $s ]] && ((s >= KILL_AT)) && break; sleep 0.1
        done
        kill -9 "$(cat "$run/pids/server-1.pid")"
      fi
      state=""
      for ((i = 0; i < 3000; i++)); do
        state=$(state_of "$job")
        [[ $state =~ SUCCEEDED|FAILED|CANCELLED ]] && break
        sleep 0.2
      done
      wall=$(($(now_ms) - t0))
      acc=$(psctl metrics "$job" --format csv |
        awk -F, '$2 == "test_accuracy" { v = $7 } END { print v }' || true)
      events=$(psctl events "$job" 2>/dev/null | awk '$3 == "rollback" || $3 == "failover" { print $3 }' |
        sort | uniq -c | awk '{ printf "%s%s x%d", sep, $2, $1; sep = ", " }' || true)
      echo "round $r factor $factor $fault: $state in ${wall} ms, accuracy ${acc:-?}, events: ${events:-none}"
      echo "$factor $fault $wall" >>"$dir/times"
      psctl cluster down >/dev/null 2>&1 || true
    done
  done
done
for factor in 1 2; do
  for fault in none kill; do
    awk -v f="$factor" -v k="$fault" '$1 == f && $2 == k { print $3 }' "$dir/times" | sort -n |
      awk -v f="$factor" -v k="$fault" '{ a[NR] = $1 } END {
        m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        printf "factor %s, %s: median %.1f s (%.1f-%.1f s, %d runs)\n", f, k, m / 1000, a[1] / 1000, a[NR] / 1000, NR }'
  done
done
