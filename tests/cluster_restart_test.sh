#!/usr/bin/env bash
# `psctl cluster up` supervises its daemons (--restart on-failure, the
# default): a shard and then the coordinator of a running BSP job are
# killed with SIGKILL and nobody restarts them by hand. The supervisor
# starts each again with its command line (--port=0: a new port; the
# shard's --data_dir: its member id; the coordinator's file), `psctl
# cluster status` counts the restarts, the job rolls back to the shard's
# checkpoint, goes on across the coordinator's move and SUCCEEDS with a
# normal accuracy. `psctl cluster down` stops the supervisor too.
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"

psctl cluster up --servers 2 --workers 2 --device cpu --bin_dir "$R" \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --coordinator_flag=--member_timeout_ms=3000 \
  --worker_flag=--report_every_steps=10 --worker_flag=--server_retry_s=60 \
  >/dev/null || { dump_logs; exit 1; }
[[ -s $RUN/supervisor.pid ]] || fail "no supervisor was started"

cat >"$T/job.pbtxt" <<EOT
name: "supervised"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer { kind: MOMENTUM learning_rate: 0.05 momentum: 0.9 }
consistency { model: BSP heartbeat_timeout_ms: 5000 }
data { batch_size: 64 max_steps: 1500 eval_every_steps: 500 eval_examples: 2000 }
checkpoint { every_versions: 20 }
num_workers: 2
seed: 3
EOT
JOB=$(submit "$T/job.pbtxt")

# restarts_of NAME: the restarts `psctl cluster status` shows for NAME
# (its process table comes first, also while the coordinator is away).
restarts_of() {
  { psctl cluster status 2>/dev/null || true; } |
    awk -v n="$1" '$1 == n && $3 == "up" { print $4 }'
}
# wait_restarted NAME SECONDS: until NAME is up again after a restart.
wait_restarted() {
  local end=$((SECONDS + $2)) r
  while ((SECONDS < end)); do
    r=$(restarts_of "$1"); [[ -n $r ]] && ((r >= 1)) && return 0
    sleep 0.3
  done
  return 1
}

wait_step "$JOB" 100 180 || fail "job did not reach step 100"
for ((i = 0; i < 300; i++)); do
  [[ -n $(find "$RUN/data/server-1" -name '*.psckpt' 2>/dev/null | head -n 1) ]] && break
  sleep 0.2
done
old_port=$(port_of server-1)
kill -9 "$(pid_of server-1)"
echo "killed server-1 (port $old_port) at step $(step_of "$JOB")"
wait_restarted server-1 60 || fail "the supervisor did not restart server-1"
echo "server-1 restarted on port $(port_of server-1)"
wait_event "$JOB" "rollback" 120 || fail "no rollback after the shard's restart"
psctl events "$JOB" | grep -E "server_moved|server_restored| rollback"

wait_step "$JOB" "$(($(step_of "$JOB") + 50))" 180 ||
  fail "the job did not go on after the rollback"
old_addr=$(coordinator_addr)
kill -9 "$(pid_of coordinator)"
echo "killed the coordinator at $old_addr"
wait_restarted coordinator 60 || fail "the supervisor did not restart the coordinator"
echo "coordinator restarted at $(coordinator_addr)"

state=$(wait_end "$JOB" 300) || true
[[ $state == SUCCEEDED ]] || fail "job ended $state"
acc=$(final_accuracy "$JOB")
echo "job SUCCEEDED; final accuracy $acc"
fcmp "$acc >= 0.80" || fail "final accuracy $acc below 0.80"
cat "$RUN/events.log"
grep -Eq "restart +server-1" "$RUN/events.log" || fail "no restart event for server-1"

sup=$(cat "$RUN/supervisor.pid")
psctl cluster down >/dev/null
kill -0 "$sup" 2>/dev/null && fail "the supervisor outlived cluster down"
echo "PASS"
