#!/usr/bin/env bash
# Fault: a slow network path. One of two workers talks to the coordinator and
# the shard through tools/netsim/delay_proxy (an HTTP CONNECT proxy, picked up by
# gRPC from grpc_proxy=...) that delays every byte by 40 ms each way; the
# other talks directly. Every job SUCCEEDS with nobody evicted. ASP: the
# fast worker is not held back (it finishes its steps in under half the slow
# one's time). SSP(2) and BSP: it is held to the slow one's pace (within the
# staleness bound, resp. each step), and BSP waits for the slow worker
# within its barrier timeout instead of evicting it.
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"
PROXY="$R/tools/netsim/delay_proxy"

psctl cluster up --servers 1 --workers 1 --device cpu --bin_dir "$R" \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --worker_flag=--report_every_steps=5 >/dev/null || { dump_logs; exit 1; }
"$PROXY" --port_file="$T/proxy.port" --delay_ms=40 --max_seconds=300 \
  2>"$RUN/logs/proxy.log" &
EXTRA_PIDS+=($!)
for _ in $(seq 50); do [[ -s $T/proxy.port ]] && break; sleep 0.1; done
proxy="http://127.0.0.1:$(tr -d '[:space:]' <"$T/proxy.port")"
grpc_proxy=$proxy start_worker --report_every_steps=5
end=$((SECONDS + 30))
until (($(psctl cluster status 2>/dev/null | grep WORKER | grep -c ALIVE) >= 2)); do
  ((SECONDS < end)) || fail "the worker behind the proxy did not register"
  sleep 0.3
done
grep -q CONNECT "$RUN/logs/proxy.log" || fail "the slow worker did not use the proxy"
slow_member=$(sed -n 's/.*registered as member \([0-9]*\).*/\1/p' \
  "$RUN/logs/worker-extra.log" | tail -n1)

run() {  # run MODEL STEPS EXTRA: prints the job id
  cat >"$T/$1.pbtxt" <<EOT
name: "slow-$1"
model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
optimizer { learning_rate: 0.05 }
consistency { model: $1 $3 barrier_timeout_ms: 20000 }
data { batch_size: 64 max_steps: $2 eval_examples: 1000 }
num_workers: 2
EOT
  submit "$T/$1.pbtxt"
}
# "member first_ms last_ms" per worker (its first and last loss report),
# the one that finished first on top.
times() {
  psctl metrics "$1" --format csv | awk -F, '$2 == "train_loss" {
      if (!($6 in f)) f[$6] = $5; l[$6] = $5 }
    END { for (m in f) print m, f[m], l[m] }' | sort -k3 -n
}

for mode in ASP SSP BSP; do
  extra=""; steps=100
  [[ $mode == SSP ]] && extra="staleness: 2"
  [[ $mode == BSP ]] && steps=50
  JOB=$(run $mode $steps "$extra")
  t0=$SECONDS
  state=$(wait_end "$JOB" 150) || true
  [[ $state == SUCCEEDED ]] || fail "$mode job ended $state"
  psctl events "$JOB" | grep -q evicted && fail "$mode: a worker was evicted"
  read -r slow_m slow_0 slow_1 < <(times "$JOB" | awk -v m="$slow_member" '$1 == m')
  read -r fast_m fast_0 fast_1 < <(times "$JOB" | awk -v m="$slow_member" '$1 != m')
  start=$((fast_0 < slow_0 ? fast_0 : slow_0))
  echo "$mode: SUCCEEDED in $((SECONDS - t0)) s; direct member $fast_m done after" \
    "$((fast_1 - start)) ms, member $slow_m (slow path) after $((slow_1 - start)) ms"
  case $mode in
    ASP) (( (fast_1 - start) * 2 < slow_1 - start )) ||
      fail "ASP: the fast worker was held to the slow one's pace" ;;
    *) (( (fast_1 - start) * 2 >= slow_1 - start )) ||
      fail "$mode: the fast worker ran far ahead of the slow one" ;;
  esac
done
echo "PASS"
