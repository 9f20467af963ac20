#!/usr/bin/env bash
# Fault: a worker killed for good under ASP on streamed text data (real
# local cluster: coordinator, 1 ps_server, 3 CPU ps_workers on loopback;
# matrix factorization on planted MovieLens-format ratings from
# movielens_gen, sized by epochs: the workers count the examples in their
# counting pass and report the job's steps per data shard through their
# heartbeats). After heartbeat_timeout_ms the killed worker is evicted and
# its untrained batches, from the last step it reported, are
#   --leftover TRAIN: moved to the two survivors (event "data_moved ...
#     moved to member"), who train them batch by batch after their own; the
#     job SUCCEEDS with every one of its examples trained (psctl status:
#     "data N/N examples trained") and a normal test RMSE;
#   --leftover SKIP: counted (event "data_skipped"); the job SUCCEEDS with
#     examples trained + skipped = all of its examples.
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"
source "${TEST_SRCDIR}/ps/tests/mf_model.sh"
LEFTOVER=TRAIN
while (($#)); do
  case $1 in
    --leftover) LEFTOVER=$2; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done

D="$T/ml"
mkdir -p "$D"
LINES=150000
"$R/tools/data/movielens_gen" --out_dir="$D" --train_lines=$LINES \
  --test_lines=5000 --users=300 --items=400 --progress=false >/dev/null ||
  fail "movielens_gen failed"
floor=$(sed -n 's/.*"noise_floor_rmse": \([0-9.]*\).*/\1/p' "$D/truth.json")

psctl cluster up --restart no --servers 1 --workers 3 --device cpu --bin_dir "$R" \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --coordinator_flag=--member_timeout_ms=3000 \
  --worker_flag=--heartbeat_interval_ms=200 \
  --worker_flag=--report_every_steps=10 >/dev/null || { dump_logs; exit 1; }

EPOCHS=2
BATCH=64
cat >"$T/job.pbtxt" <<EOT
name: "leftover-text"
$(mf_model)
optimizer { kind: ADAM learning_rate: 0.01 }
consistency { model: ASP heartbeat_timeout_ms: 3000 }
data {
  format: MOVIELENS
  train_files: "$D/train.txt"
  test_files: "$D/test.txt"
  batch_size: $BATCH
  epochs: $EPOCHS
  shuffle_buffer: 5000
  eval_every_steps: 1000
  leftover_data: $LEFTOVER
}
num_workers: 3
seed: 3
EOT
last_metric() {
  psctl metrics "$1" --format csv |
    awk -F, -v m="$2" '$2 == m { v = $7 } END { print v }'
}

JOB=$(submit "$T/job.pbtxt")
# Past the counting pass and some way into the job.
wait_step "$JOB" 300 180 || fail "job did not reach step 300"
read -r _ total _ <<<"$(data_of "$JOB")"
[[ -n $total ]] && ((total > 0)) ||
  fail "the job's examples are not known after step 300: '$total'"
kill_worker_for_good "$JOB" "$LEFTOVER"
state=$(wait_end "$JOB" 400) || true
[[ $state == SUCCEEDED ]] || fail "job ended $state"
read -r trained total skipped <<<"$(data_of "$JOB")"
rmse=$(last_metric "$JOB" test_rmse)
echo "examples trained $trained of $total, skipped $skipped; test RMSE $rmse" \
  "(noise floor $floor)"
# Every data shard holds about a third of the lines; an epoch trains the
# smallest one's full batches from each.
[[ -n $total ]] && ((total <= EPOCHS * LINES && total >= EPOCHS * LINES * 9 / 10)) ||
  fail "examples in all: '$total', not about $((EPOCHS * LINES))"
check_leftover_counts "$LEFTOVER" "$trained" "$total" "$skipped"
fcmp "$rmse > 0 && $rmse < 1.0" || fail "test RMSE $rmse"
echo "PASS"
