#!/usr/bin/env bash
# Fault: kill -9 the coordinator mid-job (real local cluster: 1 shard, 2 CPU
# workers) and restart it on the same port and --data_dir. The daemons keep
# their state and re-register; the job goes on from its record (the
# "coordinator restarted" event) and SUCCEEDS; no acknowledged job record,
# event or metric point from before the kill is lost.
#
# --new_port (target fault_coordinator_new_port_test): the coordinator is
# restarted with the command line `psctl cluster up` gave it (--port=0), so
# it comes back on another port and rewrites the cluster's coordinator file
# (--coordinator_file); the daemons, which follow that file, find it there,
# and nobody is evicted (the restarted coordinator's grace period).
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"
new_port=()
while (($#)); do
  case $1 in
    --new_port) new_port=(--port=0); shift ;;
    *) fail "unknown argument $1" ;;
  esac
done

cflags=(--heartbeat_interval_ms=200 --member_timeout_ms=3000)
psctl cluster up --restart no --servers 1 --workers 2 --device cpu --bin_dir "$R" \
  "${cflags[@]/#/--coordinator_flag=}" \
  --worker_flag=--report_every_steps=10 >/dev/null || { dump_logs; exit 1; }

cat >"$T/done.pbtxt" <<EOT
name: "before"
model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
optimizer { learning_rate: 0.1 }
data { batch_size: 64 max_steps: 30 eval_examples: 1000 }
num_workers: 2
EOT
cat >"$T/job.pbtxt" <<EOT
name: "coord-kill"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer { kind: MOMENTUM learning_rate: 0.05 momentum: 0.9 }
consistency { model: BSP heartbeat_timeout_ms: 5000 }
data { batch_size: 64 max_steps: 2500 eval_every_steps: 500 eval_examples: 2000 }
num_workers: 2
seed: 5
EOT
# A finished job: its record and metrics must survive too.
DONE=$(submit "$T/done.pbtxt")
[[ $(wait_end "$DONE" 90) == SUCCEEDED ]] || { JOB=$DONE; fail "first job failed"; }
psctl metrics "$DONE" --format csv >"$T/done_before.csv"

JOB=$(submit "$T/job.pbtxt")
wait_step "$JOB" 300 120 || fail "job did not reach step 300"
psctl metrics "$JOB" --format csv >"$T/before.csv"
psctl events "$JOB" >"$T/events_before.txt"
victim=$(pid_of coordinator)
kill -9 "$victim"
echo "killed the coordinator (pid $victim); $(grep -c ,train_loss, "$T/before.csv") loss points acknowledged"
old_addr=$(coordinator_addr)
sleep 2
restart_coordinator "${cflags[@]}" "${new_port[@]}"
if ((${#new_port[@]})); then
  for ((i = 0; i < 300; i++)); do
    [[ $(coordinator_addr 2>/dev/null) != "$old_addr" ]] && break
    sleep 0.2
  done
  [[ $(coordinator_addr) != "$old_addr" ]] ||
    fail "the coordinator did not come back at another address"
  echo "coordinator moved from $old_addr to $(coordinator_addr)"
fi
# Members re-register.
end=$((SECONDS + 30)); alive=0
while ((SECONDS < end)); do
  alive=$(psctl cluster status 2>/dev/null | grep -c ALIVE || true)
  ((alive >= 3)) && break
  sleep 0.5
done
((alive >= 3)) || fail "only $alive members re-registered within 30 s"
echo "$alive members re-registered"
s=$(state_of "$JOB")
echo "job state after the restart: $s"
[[ $s =~ RUNNING|SUCCEEDED|FAILED ]] || fail "job state '$s' after the restart"
psctl events "$JOB" | grep -q "coordinator restarted" ||
  fail "no event says the coordinator restarted"
state=$(wait_end "$JOB" 150) || true
[[ $state == SUCCEEDED ]] || fail "job ended $state after the coordinator restart"
if ((${#new_port[@]})); then
  psctl events "$JOB" | grep -E " evicted" &&
    fail "a worker was evicted across the coordinator's move"
fi
echo "job SUCCEEDED; final accuracy $(final_accuracy "$JOB")"
# Nothing acknowledged is lost: every earlier metric row and event is still
# there, and the finished job's record and metrics are unchanged.
psctl metrics "$JOB" --format csv >"$T/after.csv"
missing=$( (grep -vxFf "$T/after.csv" "$T/before.csv" || true) | wc -l)
((missing == 0)) || { grep -vxFf "$T/after.csv" "$T/before.csv" | head; fail "$missing metric rows lost"; }
psctl events "$JOB" >"$T/events_after.txt"
lost=$( (grep -vxFf "$T/events_after.txt" "$T/events_before.txt" || true) | wc -l)
((lost == 0)) || fail "$lost events lost"
[[ $(state_of "$DONE") == SUCCEEDED ]] || fail "the finished job's state changed"
psctl metrics "$DONE" --format csv >"$T/done_after.csv"
cmp -s "$T/done_after.csv" "$T/done_before.csv" ||
  fail "the finished job's metrics changed: $(diff "$T/done_before.csv" "$T/done_after.csv" | head -n 20)"
echo "no acknowledged metric row ($(grep -c . "$T/before.csv")) or event ($(grep -c . "$T/events_before.txt")) lost"
echo "PASS"
