#!/usr/bin/env bash
# Fault: kill -9 one worker of a running BSP job (real local cluster:
# coordinator, 1 ps_server, 3 CPU ps_workers on loopback).
#  1. A clean run of the job gives the reference accuracy.
#  2. The same job with worker-2 killed mid-run: the barrier does not hang;
#     after heartbeat_timeout_ms the worker is evicted, its data shard moves
#     to a survivor, the job SUCCEEDS, and its accuracy is within one point
#     of the clean run.
#  3. The killed worker is restarted by hand with the same flags; a longer job
#     runs on all three; worker-1 is killed and restarted: it fills the
#     vacant rank ("rejoined" at the current step, not 0) and the job
#     SUCCEEDS.
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"

psctl cluster up --restart no --servers 1 --workers 3 --device cpu --bin_dir "$R" \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --coordinator_flag=--member_timeout_ms=3000 \
  --worker_flag=--heartbeat_interval_ms=200 \
  --worker_flag=--report_every_steps=10 >/dev/null || { dump_logs; exit 1; }

spec() {  # spec NAME STEPS
  cat >"$T/$1.pbtxt" <<EOT
name: "$1"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer {
  kind: MOMENTUM learning_rate: 0.05 momentum: 0.9
  # Cosine decay: the final accuracy is the plateau's, not one noisy point.
  schedule { kind: COSINE total_steps: $2 min_lr: 0.0005 }
}
consistency { model: BSP heartbeat_timeout_ms: 3000 barrier_timeout_ms: 60000 }
data { batch_size: 64 max_steps: $2 eval_every_steps: 500 }
num_workers: 3
seed: 7
EOT
}

# 1. Clean run.
spec clean 2000
JOB=$(submit "$T/clean.pbtxt")
t0=$SECONDS
[[ $(wait_end "$JOB" 150) == SUCCEEDED ]] || fail "clean run did not succeed"
clean_acc=$(final_accuracy "$JOB")
echo "clean run: accuracy $clean_acc in $((SECONDS - t0)) s"

# 2. Worker killed at step 300.
spec killed 2000
JOB=$(submit "$T/killed.pbtxt")
wait_step "$JOB" 300 90 || fail "job did not reach step 300"
victim=$(pid_of worker-2)
kill -9 "$victim"
t_kill=$SECONDS
echo "killed worker-2 (pid $victim) at step $(step_of "$JOB")"
wait_event "$JOB" "evicted" 30 || fail "worker not evicted within 30 s"
echo "evicted after $((SECONDS - t_kill)) s"
psctl events "$JOB" | grep -E "moved to member" ||
  fail "no membership event moving the data shard"
s1=$(step_of "$JOB")
# The barrier does not wait for the dead worker: the job moves on and ends.
state=$(wait_end "$JOB" 150) || true
[[ $state == SUCCEEDED ]] ||
  fail "job with a killed worker ended $state (step $s1 at the eviction)"
killed_acc=$(final_accuracy "$JOB")
echo "killed run: accuracy $killed_acc (clean $clean_acc)"
fcmp "($killed_acc - $clean_acc) < 0.01 && ($clean_acc - $killed_acc) < 0.01" ||
  fail "accuracy $killed_acc not within one point of the clean run ($clean_acc)"

# 3. Restart the killed worker by hand (same flags as `cluster up`): it
# registers and is idle. A longer job on all three; kill worker-1 mid-job,
# start it again: it fills the vacant rank at the current step.
start_worker --heartbeat_interval_ms=200 --report_every_steps=10
spec rejoin 3000
JOB=$(submit "$T/rejoin.pbtxt")
wait_step "$JOB" 200 90 || fail "rejoin job did not reach step 200"
kill -9 "$(pid_of worker-1)"
wait_event "$JOB" "evicted" 30 || fail "worker-1 not evicted"
start_worker --heartbeat_interval_ms=200 --report_every_steps=10
wait_event "$JOB" "rejoined" 60 || fail "the restarted worker did not rejoin"
rejoin_line=$(psctl events "$JOB" | grep rejoined | tail -n1)
echo "$rejoin_line"
at=$(sed -n 's/.* at step \([0-9]*\).*/\1/p' <<<"$rejoin_line")
[[ -n $at ]] && ((at > 0)) || fail "rejoined at step '$at', not the current step"
state=$(wait_end "$JOB" 150) || true
[[ $state == SUCCEEDED ]] || fail "rejoin job ended $state"
echo "PASS"
