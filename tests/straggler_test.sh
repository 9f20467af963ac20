#!/usr/bin/env bash
# Straggler handling on a real local cluster (1 shard, 3 CPU workers, rank 2
# slowed by an injected delay):
#  1. BSP with one backup worker makes steps faster than plain BSP, for a
#     dense model and for a sparse one (matrix factorization on ratings:
#     the late worker catches up instead of training every step);
#  2. BSP without backups evicts a worker that holds a step past the barrier
#     timeout, and the job still finishes.
set -euo pipefail
R="${TEST_SRCDIR}/ps"
RUN="${TEST_TMPDIR}/cluster"
T="$TEST_TMPDIR"
psctl() { "$R/tools/psctl/psctl" --run_dir "$RUN" --timeout 20 "$@"; }
trap 'psctl cluster down >/dev/null 2>&1 || true' EXIT
psctl cluster up --servers 1 --workers 3 --bin_dir "$R" \
  --worker_flag=--report_every_steps=5 --worker_flag=--heartbeat_interval_ms=200

spec() {  # spec NAME DELAY_MS CONSISTENCY STEPS
  cat > "$T/$1.pbtxt" <<EOT
name: "$1"
model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
optimizer { learning_rate: 0.05 }
consistency { $3 }
data { batch_size: 64 max_steps: $4 eval_every_steps: 1000 eval_examples: 500 }
num_workers: 3
stragglers { worker_rank: 2 delay_ms: $2 }
EOT
}
source "$R/tests/mf_model.sh"
mkdir -p "$T/ml"
"$R/tools/data/movielens_gen" --out_dir="$T/ml" --train_lines=20000 \
  --test_lines=1000 --users=200 --items=300 --progress=false > /dev/null
sparse_spec() {  # sparse_spec NAME DELAY_MS CONSISTENCY STEPS
  cat > "$T/$1.pbtxt" <<EOT
name: "$1"
$(mf_model)
optimizer { kind: ADAM learning_rate: 0.03 }
consistency { $3 }
data { format: MOVIELENS train_files: "$T/ml/train.txt" batch_size: 64
       max_steps: $4 shuffle_buffer: 1000 }
num_workers: 3
stragglers { worker_rank: 2 delay_ms: $2 }
EOT
}
run() {  # run NAME -> prints the seconds the job took
  local start end job
  start=$(date +%s%N)
  job=$(psctl submit "$T/$1.pbtxt" | head -n1)
  psctl wait "$job" > "$T/$1.out" || { cat "$T/$1.out"; psctl events "$job"; return 1; }
  end=$(date +%s%N)
  echo "$job $(( (end - start) / 1000000 ))"
}

spec plain 40 "model: BSP" 60
spec backup 40 "model: BSP backup_workers: 1" 60
read -r plain_job plain_ms < <(run plain)
read -r backup_job backup_ms < <(run backup)
echo "plain BSP: 60 steps in ${plain_ms} ms; BSP + 1 backup: 60 steps in ${backup_ms} ms"
# The straggler alone needs 60 x 40 ms = 2.4 s under plain BSP.
(( plain_ms >= 2400 )) || { echo "FAIL: plain BSP did not wait for the straggler"; exit 1; }
(( backup_ms * 3 < plain_ms * 2 )) ||
  { echo "FAIL: backup worker did not make BSP at least 1.5x faster"; exit 1; }
psctl events "$backup_job" > "$T/backup.events"
psctl status "$backup_job"

# The same on a sparse model. (Before the sparse loop caught up, the late
# worker trained all 60 steps: 2.75 s against 3.47 s plain, 1.26x.)
sparse_spec sparse_plain 40 "model: BSP" 60
sparse_spec sparse_backup 40 "model: BSP backup_workers: 1" 60
read -r sp_job sp_ms < <(run sparse_plain)
read -r sb_job sb_ms < <(run sparse_backup)
echo "sparse plain BSP: 60 steps in ${sp_ms} ms; BSP + 1 backup: ${sb_ms} ms"
(( sp_ms >= 2400 )) || { echo "FAIL: sparse plain BSP did not wait for the straggler"; exit 1; }
(( sb_ms * 3 < sp_ms * 2 )) ||
  { psctl events "$sb_job"; echo "FAIL: backup worker did not make sparse BSP at least 1.5x faster"; exit 1; }

# A worker that sleeps 4 s per step holds every barrier; with a 1.5 s
# barrier timeout it is evicted and the other two finish the job.
spec evict 4000 "model: BSP barrier_timeout_ms: 1500" 40
read -r evict_job evict_ms < <(run evict)
psctl events "$evict_job" | tee "$T/evict.events"
grep -q "evicted" "$T/evict.events" || { echo "FAIL: no eviction event"; exit 1; }
grep -q "SUCCEEDED" "$T/evict.out" || { echo "FAIL: job did not finish"; exit 1; }
echo "evicted straggler; job finished in ${evict_ms} ms"
echo PASS
