#!/usr/bin/env bash
# Fault: kill -9 the ps_server shard mid-job (real local cluster: coordinator,
# 1 shard, 2 CPU workers; the job checkpoints every 20 versions). While the
# shard is down the workers stall and retry (nobody is evicted, the job stays
# RUNNING); the shard is restarted on the same port and --data_dir; the
# coordinator notices (server_failure, server_recovered) and sets the job up
# again from the shard's newest checkpoint (server_restored "from its
# checkpoint at version V", V > 0: the weights are not reset to initial
# values).
#
# With --strict (target fault_server_resume_test, tagged manual) the job must
# then resume and SUCCEED with the loss continuing. KNOWN GAP (issue 7 note):
# it does not yet -- the restored shard is at version V while the workers are
# at step t > V; BSP pulls wait for version t and pushes for step t are
# refused ("base_version t is ahead of the shard's version V"), so the
# workers fail after --server_retry_s and the job ends FAILED. Without
# --strict the test accepts that end but requires it to be a clear FAILED
# state naming the cause, within the bound.
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"
strict=0
[[ ${1:-} == --strict ]] && strict=1

psctl cluster up --servers 1 --workers 2 --device cpu --bin_dir "$R" \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --coordinator_flag=--member_timeout_ms=3000 \
  --worker_flag=--report_every_steps=10 --worker_flag=--server_retry_s=20 \
  >/dev/null || { dump_logs; exit 1; }

cat >"$T/job.pbtxt" <<EOT
name: "server-kill"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer { kind: MOMENTUM learning_rate: 0.05 momentum: 0.9 }
consistency { model: BSP heartbeat_timeout_ms: 3000 }
data { batch_size: 64 max_steps: 300 eval_every_steps: 100 eval_examples: 2000 }
checkpoint { every_versions: 20 }
num_workers: 2
seed: 11
EOT
JOB=$(submit "$T/job.pbtxt")
wait_step "$JOB" 100 120 || fail "job did not reach step 100"
# Kill only once the shard has written a checkpoint (the writes can lag the
# every_versions cadence on a busy machine).
for ((i = 0; i < 300; i++)); do
  [[ -n $(find "$RUN/data/server-0" -type f 2>/dev/null | head -n 1) ]] && break
  sleep 0.2
done
victim=$(pid_of server-0)
kill -9 "$victim"
step_kill=$(step_of "$JOB")
echo "killed server-0 (pid $victim) at step $step_kill"
ls -R "$RUN/data/server-0" 2>&1 | head -n 20 || true
# Stalled, not failed: the workers retry the missing shard for 5 s.
sleep 5
s=$(state_of "$JOB")
[[ $s == RUNNING ]] || fail "job is $s while the shard is down (want RUNNING)"
psctl events "$JOB" | grep -Eq "worker_failure|evicted" &&
  fail "a worker gave up while the shard was down"
restart_server 0
echo "restarted server-0 on port $(port_of server-0)"
wait_event "$JOB" "server_restored" 60 || fail "no server_restored event"
psctl events "$JOB" | grep -E "server_restored|server_recovered|server_failure"
restored=$(psctl events "$JOB" | grep -E "server_restored" | tail -n1)
v=$(sed -n 's/.*from its checkpoint at version \([0-9]*\).*/\1/p' <<<"$restored")
[[ -n $v ]] && ((v > 0)) || fail "the shard was not restored from a checkpoint: $restored"
echo "restored at version $v (job at step $step_kill when killed)"
state=$(wait_end "$JOB" 120) || true
if ((strict)); then
  [[ $state == SUCCEEDED ]] || fail "job ended $state after the shard restart"
  first=$(first_loss "$JOB")
  after=$(loss_from_step "$JOB" $((step_kill + 1)))
  echo "train loss: first report $first, first report after the kill $after"
  fcmp "$after < 0.75 * $first" ||
    fail "loss after the restart ($after) is back near the initial loss ($first)"
else
  case $state in
    SUCCEEDED) echo "job SUCCEEDED after the restart" ;;
    FAILED)
      reason=$(psctl status "$JOB" | awk '$1 == "state"')
      echo "KNOWN GAP: $reason"
      grep -Eq "parameter servers|ahead of the shard" <<<"$reason" ||
        fail "the job failed without naming the shard problem: $reason" ;;
    *) fail "job did not end within the bound (state $state)" ;;
  esac
fi
echo "PASS"
