#!/usr/bin/env bash
# Fault: kill -9 the ps_server shard mid-job (real local cluster: coordinator,
# 1 shard, 2 CPU workers; the job checkpoints every 20 versions). While the
# shard is down the workers stall and retry (nobody is evicted, the job stays
# RUNNING); the shard is restarted on the same port and --data_dir; the
# coordinator notices (server_failure, server_recovered), sets the job up
# again from the shard's newest checkpoint (server_restored "from its
# checkpoint at version V", V > 0) and rolls the job back to it (rollback:
# the workers drop their step and restart at step V, incarnation 1). The job
# then finishes (SUCCEEDED) with the loss continuing from the checkpoint, not
# from the initial weights.
#
# --servers 2 (target fault_server_2shards_test): two shards with a data
# directory each; shard 1 is killed, restores its own files, and shard 0 is
# rolled back to the same version.
# --consistency SSP (target fault_server_ssp_test): versions count worker
# steps, so the workers restart at version / workers.
# --new_port (target fault_server_new_port_test): the shard is restarted
# with the command line `psctl cluster up` gave it (--port=0), so it comes
# back on another port; it registers under the member id kept in its
# --data_dir, the coordinator moves the shard there (server_moved) and the
# workers get the new address with the rollback.
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"
servers=1
model=BSP
new_port=""
while (($#)); do
  case $1 in
    --servers) servers=$2; shift 2 ;;
    --new_port) new_port=0; shift ;;
    --consistency) model=$2; shift 2 ;;
    *) fail "unknown argument $1" ;;
  esac
done
victim_shard=$((servers - 1))
victim_name=server-$victim_shard

psctl cluster up --restart no --servers "$servers" --workers 2 --device cpu --bin_dir "$R" \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --coordinator_flag=--member_timeout_ms=3000 \
  --worker_flag=--report_every_steps=10 --worker_flag=--server_retry_s=20 \
  >/dev/null || { dump_logs; exit 1; }

bound=""
[[ $model == SSP ]] && bound="staleness: 3"
cat >"$T/job.pbtxt" <<EOT
name: "server-kill"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer { kind: MOMENTUM learning_rate: 0.05 momentum: 0.9 }
consistency { model: $model heartbeat_timeout_ms: 3000 $bound }
data { batch_size: 64 max_steps: 1500 eval_every_steps: 500 eval_examples: 2000 }
checkpoint { every_versions: 20 }
num_workers: 2
seed: 11
EOT
JOB=$(submit "$T/job.pbtxt")
wait_step "$JOB" 100 120 || fail "job did not reach step 100"
# Kill only once the shard has written a checkpoint (the writes can lag the
# every_versions cadence on a busy machine). Checkpoint files only: the data
# directory also holds the shard's member_id file from its first start.
for ((i = 0; i < 300; i++)); do
  [[ -n $(find "$RUN/data/$victim_name" -name '*.psckpt' 2>/dev/null | head -n 1) ]] && break
  sleep 0.2
done
[[ -n $(find "$RUN/data/$victim_name" -name '*.psckpt' 2>/dev/null | head -n 1) ]] ||
  fail "$victim_name wrote no checkpoint in 60 s"
victim=$(pid_of "$victim_name")
kill -9 "$victim"
step_kill=$(step_of "$JOB")
echo "killed $victim_name (pid $victim) at step $step_kill"
ls -R "$RUN/data/$victim_name" 2>&1 | head -n 20 || true
# Stalled, not failed: the workers retry the missing shard for 5 s.
sleep 5
s=$(state_of "$JOB")
[[ $s == RUNNING ]] || fail "job is $s while the shard is down (want RUNNING)"
psctl events "$JOB" | grep -Eq "worker_failure|evicted" &&
  fail "a worker gave up while the shard was down"
old_port=$(port_of "$victim_name")
restart_server "$victim_shard" $new_port
if [[ -n $new_port ]]; then
  for ((i = 0; i < 300; i++)); do
    [[ $(port_of "$victim_name" 2>/dev/null) != "$old_port" ]] && break
    sleep 0.2
  done
  [[ $(port_of "$victim_name") != "$old_port" ]] ||
    fail "the restarted shard did not come back on a new port"
  wait_event "$JOB" "server_moved" 60 || fail "no server_moved event"
  psctl events "$JOB" | grep -E "server_moved"
fi
echo "restarted $victim_name on port $(port_of "$victim_name") (was $old_port)"
wait_event "$JOB" "server_restored" 60 || fail "no server_restored event"
psctl events "$JOB" | grep -E "server_restored|server_recovered|server_failure"
restored=$(psctl events "$JOB" | grep -E "server_restored" | tail -n1)
v=$(sed -n 's/.*from its checkpoint at version \([0-9]*\).*/\1/p' <<<"$restored")
[[ -n $v ]] && ((v > 0)) || fail "the shard was not restored from a checkpoint: $restored"
echo "restored at version $v (job at step $step_kill when killed)"
wait_event "$JOB" "rollback" 60 || fail "no rollback event"
# The train_loss rows so far; the workers' reports after these (a second
# later, once they restarted) are from after the rollback.
sleep 1
rows_before=$(psctl metrics "$JOB" --format csv | awk -F, '$2 == "train_loss"' | wc -l)
psctl events "$JOB" | grep -E " rollback"
start=$(psctl events "$JOB" | grep -E " rollback" | tail -n1 |
  sed -n 's/.*restart at step \([0-9]*\) .*/\1/p')
[[ -n $start ]] || fail "the rollback event names no start step"
if [[ $model == BSP ]]; then
  ((start == v)) || fail "the workers restart at step $start, not at the restored version $v"
else
  # ASP/SSP versions count worker steps (2 workers); each shard restores its
  # own newest checkpoint, so they may differ by a checkpoint interval (20).
  ((start <= v / 2 && start >= v / 2 - 20)) ||
    fail "the workers restart at step $start, not near version $v / 2"
fi
state=$(wait_end "$JOB" 120) || true
[[ $state == SUCCEEDED ]] || fail "job ended $state after the shard restart"
first=$(first_loss "$JOB")
# Each worker's first train_loss report after the rollback.
after=$(psctl metrics "$JOB" --format csv | awk -F, -v skip="$rows_before" '
  $2 == "train_loss" && ++row > skip && !($6 in f) { f[$6] = $7 }
  END { for (w in f) { s += f[w]; n++ } if (n) print s / n }')
[[ -n $after ]] || fail "no train_loss report after the rollback"
echo "train loss: first report $first, first report after the rollback to version $v (step $start): $after"
fcmp "$after < 0.75 * $first" ||
  fail "loss after the restart ($after) is back near the initial loss ($first)"
echo "PASS"
