#!/usr/bin/env bash
# Replicated shards are exact (docs/faults.md, "Replicated shards"): a
# backup holds what its primary holds, bit for bit, so a failover changes
# nothing in the trained model. A factorization machine on a planted click
# log (tools/data/criteo_gen): Adam on its dense tensors, lazy Adam on its
# two sparse tables, BSP, `replication { factor: 2 }`, 3 ps_servers (each
# with its own --data_dir) and 2 CPU workers, the same seed, run on two
# fresh local clusters:
# - clean;
# - with server-1 killed with SIGKILL mid-job and left down: the
#   coordinator declares it dead after --member_timeout_ms and promotes its
#   shard's backup.
# Both SUCCEED, the faulted run has a `failover` event and no `rollback`.
# Then every shard's newest final checkpoint (written at teardown by each
# replica that holds the shard: ckpt-v<version>-s<shard>-of-3.psckpt under
# <data_dir>/<job_id>/) of both runs, primary's and backup's, is compared
# with one of the clean run's by checkpoint_diff: the same version, and
# every dense range's weights, Adam slots and step count and every sparse
# row (by key) with its slots and step count equal as bits. Prints how many
# values were compared.
# Checks that the test can fail, and a first suspect when it does:
#   --second_seed N  the second run's job has seed N (the comparison fails);
#   --no_kill        the second run is clean too (are clean runs exact?).
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"
DIFF="$R/tests/checkpoint_diff"
STEPS=300
KILL_AT=100
seed2=1
kill2=1
while (($#)); do
  case $1 in
    --second_seed) seed2=$2; shift 2 ;;
    --no_kill) kill2=0; shift ;;
    *) fail "unknown argument $1" ;;
  esac
done

D="$T/ctr"
mkdir -p "$D"
"$R/tools/data/criteo_gen" --out_dir="$D" --train_lines=20000 \
  --test_lines=2000 --max_vocab=100 --progress=false >/dev/null

fields=""
for i in $(seq 1 26); do fields="$fields\"C$i\", "; done
fields="${fields%, }"
inputs=""
for i in $(seq 1 26); do inputs="$inputs inputs { name: \"C$i\" }"; done
job_spec() {  # name seed
  cat <<EOT
name: "$1"
model {
  sparse_tables {
    name: "fm_v" dim: 8 init { kind: NORMAL scale: 0.01 }
    optimizer { kind: ADAM learning_rate: 0.01 }
  }
  sparse_tables { name: "fm_w" dim: 1 optimizer { kind: ADAM learning_rate: 0.01 } }
  inputs { name: "dense" shape: 13 }
  $inputs
  layers { name: "dense_v" inputs: "dense" dense { units: 8 } }
  layers { name: "v" inputs: [$fields] embedding_bag { table: "fm_v" } }
  layers { name: "fm2" inputs: [ "dense_v", "v" ] fm_interaction {} }
  layers { name: "w" inputs: [$fields] embedding_bag { table: "fm_w" } }
  layers { name: "terms" inputs: [ "fm2", "w", "dense" ] concat {} }
  layers { name: "logit" inputs: "terms" dense { units: 1 } }
  head { loss: SIGMOID_CROSS_ENTROPY }
}
optimizer { kind: ADAM learning_rate: 0.005 }
consistency { model: BSP heartbeat_timeout_ms: 5000 }
data {
  format: CRITEO
  train_files: "$D/train.txt"
  test_files: "$D/test.txt"
  batch_size: 64
  epochs: 4
  max_steps: $STEPS
  shuffle_buffer: 2000
  eval_every_steps: 100
  eval_examples: 1000
}
checkpoint { every_versions: 100 keep: 2 }
# 16 floats a chunk: each shard holds several ranges of the dense tensors.
chunk_bytes: 64
replication { factor: 2 }
num_workers: 2
seed: $2
EOT
}

# wait_file GLOB SECONDS: until a file matches GLOB.
wait_file() {
  local end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    compgen -G "$1" >/dev/null && return 0
    sleep 0.2
  done
  return 1
}

# run_job NAME SEED KILL: runs the job on a fresh cluster in $T/NAME
# (killing server-1 for good at step $KILL_AT when KILL is 1) and copies
# every server's checkpoint files to $T/NAME-ckpt/server-I/.
run_job() {
  local name=$1 seed=$2 kill=$3 victim victim_port state last i
  RUN="$T/$name"
  psctl cluster up --restart no --servers 3 --workers 2 --device cpu --bin_dir "$R" \
    --coordinator_flag=--heartbeat_interval_ms=200 \
    --coordinator_flag=--member_timeout_ms=3000 \
    --worker_flag=--report_every_steps=20 --worker_flag=--server_retry_s=30 \
    >/dev/null || { dump_logs; exit 1; }
  job_spec "$name" "$seed" >"$T/$name.pbtxt"
  JOB=$(submit "$T/$name.pbtxt")
  if ((kill)); then
    wait_step "$JOB" "$KILL_AT" 120 || fail "$name: job did not reach step $KILL_AT"
    victim=$(pid_of server-1)
    victim_port=$(port_of server-1)
    kill -9 "$victim"
    echo "$name: killed server-1 (pid $victim) at step $(step_of "$JOB")"
    wait_event "$JOB" " failover +shard [0-9]+: primary member [0-9]+ at [^ ]*:$victim_port " 60 ||
      fail "$name: no failover event for server-1's shard"
  fi
  state=$(wait_end "$JOB" 180) || true
  [[ $state == SUCCEEDED ]] || fail "$name: job ended $state"
  psctl events "$JOB" | grep -Eq "worker_failure|evicted" &&
    fail "$name: a worker gave up or was evicted"
  if ((kill)); then
    psctl events "$JOB" | grep -E "failover|backup_lost"
    # (The event's kind is its third column.)
    if psctl events "$JOB" | awk '$3 ~ /^rollback/ { found = 1 } END { exit !found }'; then
      psctl events "$JOB" | grep -E "rollback"
      fail "$name: the job rolled back: a replicated shard's loss must not"
    fi
  fi
  # The teardown writes the final checkpoints once the job has ended: wait
  # for every shard's file at the last step, then for the servers to stop
  # (a backup's teardown may come after its primary's).
  last=$(printf 'ckpt-v%020d' "$STEPS")
  for i in 0 1 2; do
    wait_file "$RUN/data/server-*/$JOB/$last-s$i-of-3.psckpt" 30 ||
      fail "$name: no final checkpoint of shard $i at version $STEPS"
  done
  psctl cluster down >/dev/null 2>&1 || true
  for i in 0 1 2; do
    mkdir -p "$T/$name-ckpt/server-$i"
    if compgen -G "$RUN/data/server-$i/$JOB/*.psckpt" >/dev/null; then
      cp "$RUN/data/server-$i/$JOB"/*.psckpt "$T/$name-ckpt/server-$i/"
    fi
  done
  echo "$name: $JOB $state, files:"
  (cd "$T/$name-ckpt" && ls -1 server-*/* | sed 's/^/  /')
  JOB=""
}

# newest_files RUN_NAME SHARD: the files of shard SHARD at its newest
# version among the run's servers (the primary's and its backups').
newest_files() {
  local v
  v=$(ls -1 "$T/$1-ckpt"/server-*/ 2>/dev/null |
    sed -n "s/^ckpt-v\([0-9]*\)-s$2-of-3\.psckpt$/\1/p" | sort -n | tail -n1)
  [[ -n $v ]] || return 0
  ls -1 "$T/$1-ckpt"/server-*/ckpt-v"$v"-s"$2"-of-3.psckpt
}

run_job clean 1 0
run_job faulted "$seed2" "$kill2"

total=0
compared=0
for shard in 0 1 2; do
  mapfile -t clean < <(newest_files clean "$shard")
  mapfile -t faulted < <(newest_files faulted "$shard")
  ((${#clean[@]} == 2)) ||
    fail "clean run: ${#clean[@]} newest files of shard $shard, want 2 (primary and backup)"
  ((${#faulted[@]} >= 1)) || fail "faulted run: no file of shard $shard"
  ref=${clean[0]}
  for f in "${clean[@]:1}" "${faulted[@]}"; do
    echo "shard $shard: ${ref#"$T"/} vs ${f#"$T"/}"
    out=$("$DIFF" "$ref" "$f") || { echo "$out"; fail "shard $shard's final state differs"; }
    echo "  $out"
    # Something of every kind was compared.
    for k in ranges slots rows; do
      n=$(sed -n "s/.* $k=\([0-9]*\).*/\1/p" <<<"$out")
      ((n > 0)) || fail "nothing compared: $k=$n"
    done
    total=$((total + $(sed -n 's/.* floats=\([0-9]*\).*/\1/p' <<<"$out")))
    compared=$((compared + 1))
  done
done
echo "compared $compared file pairs: $total floats equal bit for bit"
echo "PASS"
