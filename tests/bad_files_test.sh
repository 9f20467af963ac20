#!/usr/bin/env bash
# Bad files with real processes (local cluster: 1 shard, 1 CPU worker):
#  - a dataset directory that does not exist: submit refused (exit 5) naming
#    the path;
#  - a dataset directory holding the right names but a truncated images
#    file, or labels that do not match the images: the job ends FAILED with
#    a reason naming the file; the worker stays up and the next job succeeds.
#  - ps_server started with contradictory coordinator flags exits 2 with
#    the reason.
# (Corrupted and truncated checkpoints: server/checkpoint_test.cc and
# server/shard/job_checkpoint_test.cc
# CorruptCheckpointFallsBackToThePreviousOne.)
set -euo pipefail
source "${TEST_SRCDIR}/ps/tests/fault_lib.sh"
DS=/usr/share/datasets/fashion-mnist

psctl cluster up --servers 1 --workers 1 --device cpu --bin_dir "$R" \
  --coordinator_flag=--heartbeat_interval_ms=200 >/dev/null ||
  { dump_logs; exit 1; }

spec() {  # spec NAME PATH STEPS [EXTRA]
  cat >"$T/$1.pbtxt" <<EOT
name: "$1"
model { mlp { input_dim: 784 hidden: 16 num_classes: 10 } }
optimizer { learning_rate: 0.1 }
data { path: "$2" batch_size: 64 max_steps: $3 eval_examples: 500 }
num_workers: 1
${4:-}
EOT
}

# 1. No such directory: refused at submit, naming the path.
spec missing "$T/no-such-dir" 10
if psctl submit "$T/missing.pbtxt" >"$T/out" 2>&1; then
  fail "a job on a missing dataset directory was accepted"
fi
grep -q "no-such-dir" "$T/out" || { cat "$T/out"; fail "the error does not name the path"; }
echo "ok: missing dataset directory refused: $(head -n1 "$T/out")"

# 2. Right names, broken contents.
mkdir -p "$T/truncated" "$T/mismatch"
for f in "$DS"/*.gz; do cp "$f" "$T/truncated/"; cp "$f" "$T/mismatch/"; done
head -c 100000 "$DS/train-images-idx3-ubyte.gz" >"$T/truncated/train-images-idx3-ubyte.gz"
cp "$DS/t10k-labels-idx1-ubyte.gz" "$T/mismatch/train-labels-idx1-ubyte.gz"
for bad in truncated mismatch; do
  spec "$bad" "$T/$bad" 10
  JOB=$(submit "$T/$bad.pbtxt")
  state=$(wait_end "$JOB" 90) || true
  reason=$(psctl status "$JOB" | awk '$1 == "state"')
  [[ $state == FAILED ]] || fail "$bad dataset: job ended $state"
  grep -q "train-\(images\|labels\)" <<<"$reason" ||
    fail "$bad dataset: the reason does not name the file: $reason"
  echo "ok: $bad dataset: $reason"
done

# 3. The worker is still serving: a good job succeeds.
spec good "$DS" 20
JOB=$(submit "$T/good.pbtxt")
[[ $(wait_end "$JOB" 90) == SUCCEEDED ]] || fail "a good job after the bad ones failed"
echo "ok: the next job SUCCEEDED"

# 4. Bad daemon flags: ps_server given both --coordinator and
# --coordinator_file exits 2 with the reason (before its threads start; it
# used to abort on a joinable thread).
rc=0
timeout 20 "$R/server/ps_server" --port=0 --token_file="$RUN/token" \
  --data_dir="$T/flags-data" --coordinator=127.0.0.1:1 \
  --coordinator_file="$T/coordinator.addr" >"$T/flags.out" 2>&1 || rc=$?
((rc == 2)) || { cat "$T/flags.out"; fail "ps_server with both coordinator flags exited $rc, want 2"; }
grep -q "not both" "$T/flags.out" || { cat "$T/flags.out"; fail "the reason is not printed"; }
echo "ok: ps_server refuses both coordinator flags: $(tail -n1 "$T/flags.out")"

echo "PASS"
