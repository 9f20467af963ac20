#!/usr/bin/env bash
# Replicated shards when every replica of a shard is lost (docs/faults.md):
# a local cluster of 3 ps_servers trains a BSP job with
# `replication { factor: 2 }` and checkpoints. Mid-job two servers are
# killed with SIGKILL at once -- with 3 servers any two hold both
# replicas of one shard -- and restarted without their state. That shard
# has no copy left: the job rolls back to its checkpoints (event
# `rollback`), and then builds new backups by state transfer
# (`backup_ready`): the job SUCCEEDS with every shard backed up again and
# an accuracy like a clean run's.
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"

psctl cluster up --restart no --servers 3 --workers 2 --device cpu --bin_dir "$R" \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --coordinator_flag=--member_timeout_ms=3000 \
  --worker_flag=--report_every_steps=10 --worker_flag=--server_retry_s=30 \
  >/dev/null || { dump_logs; exit 1; }

cat >"$T/job.pbtxt" <<EOT
name: "replicated-all-lost"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer { kind: ADAM learning_rate: 0.002 }
consistency { model: BSP heartbeat_timeout_ms: 5000 }
data { batch_size: 64 max_steps: 900 eval_every_steps: 300 eval_examples: 2000 }
checkpoint { every_versions: 50 }
replication { factor: 2 }
num_workers: 2
seed: 11
EOT
JOB=$(submit "$T/job.pbtxt")
wait_step "$JOB" 150 120 || fail "job did not reach step 150"
kill -9 "$(pid_of server-1)" "$(pid_of server-2)"
echo "killed server-1 and server-2 at step $(step_of "$JOB")"
restart_server 1
restart_server 2
wait_event "$JOB" " rollback +.*the shards go on without backups until new ones are built" 90 ||
  fail "no rollback after a shard lost every replica"
psctl events "$JOB" | grep -E " (rollback|failover|backup_[a-z]+) "
state=$(wait_end "$JOB" 240) || true
[[ $state == SUCCEEDED ]] || fail "job ended $state after the rollback"
# New backups after the rollback: every shard has one again.
psctl events "$JOB" | awk '$3 == "rollback" { r = 1 } r && $3 == "backup_ready" { n++ } END { exit n < 3 }' ||
  fail "fewer than 3 backups rebuilt after the rollback: $(psctl events "$JOB" | grep -E ' backup_')"
psctl status "$JOB" | grep -E "^replicas +factor 2, backups per shard: 1, 1, 1$" ||
  fail "not every shard has a backup again: $(psctl status "$JOB" | grep -E '^replicas')"
acc=$(final_accuracy "$JOB")
echo "final test accuracy $acc"
fcmp "$acc >= 0.78" || fail "final accuracy $acc after the rollback (want >= 0.78)"
echo "PASS"
