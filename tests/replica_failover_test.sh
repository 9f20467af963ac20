#!/usr/bin/env bash
# Replicated shards (docs/faults.md): a local cluster of 3 ps_servers and 2
# CPU workers trains a job with `replication { factor: 2 }` (shard i's
# backup on server i+1). Mid-job, server-1 (the primary of one shard, the
# backup of another) is killed with SIGKILL:
# - --mode dead (default): it stays down; the coordinator finds it gone
#   (its polls refused) and promotes its shard's backup (event `failover`),
#   and tells the primary it backed up to drop it (event `backup_lost`);
# - --mode restart: it comes back at once without its state (a new
#   process under its member id); the same happens without waiting for the
#   timeout.
# The workers go on at the new primary's address, retrying what was not
# acknowledged, and the shards that lost a replica get a new backup on a
# live server, built by a state transfer while the job trains (events
# `backup_added`, `backup_ready`): the job SUCCEEDS with no rollback event,
# an accuracy like a clean run's and every shard backed up again. Prints
# the time from the kill to the failover event.
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"
mode=dead
model=BSP
while (($#)); do
  case $1 in
    --mode) mode=$2; shift 2 ;;
    --consistency) model=$2; shift 2 ;;
    *) fail "unknown argument $1" ;;
  esac
done

psctl cluster up --restart no --servers 3 --workers 2 --device cpu --bin_dir "$R" \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --coordinator_flag=--member_timeout_ms=3000 \
  --worker_flag=--report_every_steps=10 --worker_flag=--server_retry_s=30 \
  >/dev/null || { dump_logs; exit 1; }

cat >"$T/job.pbtxt" <<EOT
name: "replicated"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer { kind: ADAM learning_rate: 0.002 }
consistency { model: $model heartbeat_timeout_ms: 5000 }
data { batch_size: 64 max_steps: 900 eval_every_steps: 300 eval_examples: 2000 }
replication { factor: 2 }
num_workers: 2
seed: 11
EOT
JOB=$(submit "$T/job.pbtxt")
wait_step "$JOB" 150 120 || fail "job did not reach step 150"
psctl status "$JOB" | grep -E "^replicas +factor 2, backups per shard: 1, 1, 1$" ||
  fail "psctl status does not show the replicas"
psctl explain "$JOB" | grep -E "replicas: epoch 1" >/dev/null ||
  fail "psctl explain does not show the replicas"
victim=$(pid_of server-1)
victim_port=$(port_of server-1)  # (its shard depends on its member id)
t_kill=$(date +%s%N)
kill -9 "$victim"
echo "killed server-1 (pid $victim) at step $(step_of "$JOB")"
[[ $mode == restart ]] && restart_server 1
wait_event "$JOB" " failover +shard [0-9]+: primary member [0-9]+ at [^ ]*:$victim_port " 60 ||
  fail "no failover event for server-1's shard"
t_failover=$(date +%s%N)
echo "failover event $(((t_failover - t_kill) / 1000000)) ms after the kill (polled)"
psctl events "$JOB" | grep -E "failover|backup_lost|server_"
wait_event "$JOB" " backup_lost +shard [0-9]+: backup member [0-9]+ (at [^ ]*:$victim_port )?" 30 ||
  fail "no backup_lost event for the shard server-1 backed up"
failed=$(psctl events "$JOB" | grep -Eo " failover +shard [0-9]+" | head -n1 | awk '{ print $3 }')
wait_event "$JOB" " backup_ready +shard $failed: backup member [0-9]+ at [^ ]* is in sync" 60 ||
  fail "shard $failed got no new backup after its failover"
echo "new backup of shard $failed in sync $((($(date +%s%N) - t_kill) / 1000000)) ms after the kill (polled)"
state=$(wait_end "$JOB" 180) || true
[[ $state == SUCCEEDED ]] || fail "job ended $state after the failover"
# (The event's kind is its third column.)
if psctl events "$JOB" | awk '$3 ~ /^rollback/ { found = 1 } END { exit !found }'; then
  psctl events "$JOB" | grep -E "rollback"
  fail "the job rolled back: a replicated shard's loss must not"
fi
acc=$(final_accuracy "$JOB")
echo "final test accuracy $acc"
psctl status "$JOB" | grep -E "^replicas +factor 2, backups per shard: 1, 1, 1$" ||
  fail "not every shard has a backup again: $(psctl status "$JOB" | grep -E '^replicas')"
fcmp "$acc >= 0.78" || fail "final accuracy $acc after the failover (want >= 0.78)"
psctl events "$JOB" | grep -Eq "worker_failure|evicted" &&
  fail "a worker gave up or was evicted during the failover"
echo "PASS"
