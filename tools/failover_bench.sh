#!/usr/bin/env bash
# Time to failover of replicated shards (docs/performance/replicas.md):
# KILLS times, a fresh local cluster (3 ps_servers, 2 CPU workers) trains a
# BSP MLP on Fashion-MNIST with `replication { factor: 2 }`; at step 100
# server-1 is killed with SIGKILL, and the script times, by polling psctl
# every 0.1 s, the kill to the `failover` event and to the job's progress
# moving 5 steps past where it stood 0.3 s after the kill, and to the
# `backup_ready` event of the shard that failed over (a new backup built by
# a state transfer: two replicas again). Prints each kill and the p50 and
# max (the p99 of 10) of each.
#
#   MODE=dead tools/failover_bench.sh      # the server stays dead (default)
#   MODE=restart tools/failover_bench.sh   # psctl restarts it at once
#   KILLS=10 BIN=bazel-bin COORDINATOR_FLAGS=--member_timeout_ms=3000 ...
#
# Build first: bazel build --config=nocuda //server:ps_server
#   //server/coordinator //worker:ps_worker //tools/psctl
set -euo pipefail
BIN=$(realpath "${BIN:-bazel-bin}")
KILLS=${KILLS:-10}
MODE=${MODE:-dead}
dir=$(mktemp -d)
run="$dir/cluster"
psctl() { "$BIN/tools/psctl/psctl" --run_dir "$run" --timeout 20 "$@"; }
cleanup() { psctl cluster down >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
restart=no
[[ $MODE == restart ]] && restart=on-failure
flags=()
for f in ${COORDINATOR_FLAGS:-}; do flags+=("--coordinator_flag=$f"); done
cat >"$dir/job.pbtxt" <<EOT
name: "failover-bench"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer { kind: ADAM learning_rate: 0.002 }
consistency { model: BSP heartbeat_timeout_ms: 30000 }
data { batch_size: 64 max_steps: 100000 }
replication { factor: 2 }
num_workers: 2
EOT
step_of() { psctl status "$1" 2>/dev/null | awk '$1 == "progress" { split($3, a, "/"); print a[1] }'; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
: >"$dir/times"
for ((k = 1; k <= KILLS; k++)); do
  rm -rf "$run"
  psctl cluster up --restart "$restart" --servers 3 --workers 2 --device cpu \
    --bin_dir "$BIN" --coordinator_flag=--heartbeat_interval_ms=200 \
    "${flags[@]}" --worker_flag=--report_every_steps=1 \
    --worker_flag=--server_retry_s=60 >/dev/null
  job=$(psctl submit "$dir/job.pbtxt" | head -n1)
  for ((i = 0; i < 600; i++)); do
    s=$(step_of "$job"); [[ -n $s ]] && ((s >= 100)) && break; sleep 0.1
  done
  kill -9 "$(cat "$run/pids/server-1.pid")"
  t0=$(now_ms)
  # The job's step as the coordinator has it 0.3 s after the kill: stalled
  # by then (its progress comes with heartbeats, a few steps behind).
  sleep 0.3
  at=$(step_of "$job")
  event="" moved="" ready=""
  i=0
  while ((i++ < 1200)) && [[ -z $event || -z $moved || -z $ready ]]; do
    if [[ -z $event || -z $ready ]]; then
      events=$(psctl events "$job" 2>/dev/null || true)
      shard=$(grep -Eo " failover +shard [0-9]+" <<<"$events" | head -n1 |
        awk '{ print $3 }' || true)
      if [[ -n $shard && -z $event ]]; then event=$(($(now_ms) - t0)); fi
      if [[ -n $shard && -z $ready ]] &&
        grep -Eq " backup_ready +shard $shard:" <<<"$events"; then
        ready=$(($(now_ms) - t0))
      fi
    fi
    if [[ -z $moved ]]; then
      s=$(step_of "$job")
      [[ -n $s ]] && ((s >= at + 5)) && moved=$(($(now_ms) - t0))
    fi
    sleep 0.1
  done
  echo "kill $k: step $at, failover event after ${event:-?} ms, 5 steps on after ${moved:-?} ms, new backup in sync after ${ready:-?} ms"
  echo "${event:-999999} ${moved:-999999} ${ready:-999999}" >>"$dir/times"
  psctl cancel "$job" >/dev/null 2>&1 || true
  psctl cluster down >/dev/null 2>&1 || true
done
awk -v mode="$MODE" '
  { e[NR] = $1; m[NR] = $2; r[NR] = $3 }
  function p50(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
      if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    n = NR; me = p50(e, n); mm = p50(m, n); mr = p50(r, n)
    printf "%s, %d kills: failover event p50 %d ms, max %d ms; 5 steps on p50 %d ms, max %d ms; new backup in sync p50 %d ms, max %d ms\n",
      mode, n, me, e[n], mm, m[n], mr, r[n]
  }' "$dir/times"
