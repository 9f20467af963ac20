#!/usr/bin/env bash
# Fault: a worker killed for good under ASP (real local cluster: coordinator,
# 1 ps_server, 3 CPU ps_workers on loopback; nobody restarts it). After
# heartbeat_timeout_ms it is evicted and its untrained batches, from the
# last step it reported, are
#   --leftover TRAIN: moved to the two survivors (event "data_moved ... moved
#     to member"), who train them after their own; the job SUCCEEDS with
#     every one of the job's examples trained (psctl status: "data N/N
#     examples trained") and normal accuracy;
#   --leftover SKIP: counted (event "data_skipped", "K skipped" in psctl
#     status, K > 0); the job SUCCEEDS with fewer examples trained.
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"
LEFTOVER=TRAIN
while (($#)); do
  case $1 in
    --leftover) LEFTOVER=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done

psctl cluster up --restart no --servers 1 --workers 3 --device cpu --bin_dir "$R" \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --coordinator_flag=--member_timeout_ms=3000 \
  --worker_flag=--heartbeat_interval_ms=200 \
  --worker_flag=--report_every_steps=10 >/dev/null || { dump_logs; exit 1; }

STEPS=1500
cat >"$T/job.pbtxt" <<EOT
name: "leftover"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer { kind: MOMENTUM learning_rate: 0.02 momentum: 0.9 }
consistency { model: ASP heartbeat_timeout_ms: 3000 }
data { batch_size: 64 max_steps: $STEPS eval_every_steps: 500
       leftover_data: $LEFTOVER }
num_workers: 3
seed: 7
EOT

JOB=$(submit "$T/job.pbtxt")
wait_step "$JOB" 300 120 || fail "job did not reach step 300"
kill_worker_for_good "$JOB" "$LEFTOVER"
state=$(wait_end "$JOB" 300) || true
[[ $state == SUCCEEDED ]] || fail "job ended $state"
read -r trained total skipped <<<"$(data_of "$JOB")"
acc=$(final_accuracy "$JOB")
echo "examples trained $trained of $total, skipped $skipped; accuracy $acc"
[[ -n $total ]] && ((total == 3 * STEPS * 64)) ||
  fail "examples in all: '$total', not $((3 * STEPS * 64))"
check_leftover_counts "$LEFTOVER" "$trained" "$total" "$skipped"
fcmp "$acc > 0.80" || fail "accuracy $acc"
echo "PASS"
