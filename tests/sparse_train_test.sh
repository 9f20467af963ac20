#!/usr/bin/env bash
# End to end on streamed text data: a real local cluster (coordinator, 2
# ps_server shards, 2 CPU ps_worker processes on loopback) trains
#  - a factorization machine on a planted click log from criteo_gen (20k
#    lines, BSP): the job succeeds with test AUC above 0.7 and within 0.1 of
#    the generator's true AUC (measured: 0.79 against 0.844);
#  - matrix factorization on planted ratings from movielens_gen (BSP):
#    test RMSE below 0.95 (measured 0.86; the noise floor is 0.70, the
#    constant predictor's 1.03);
#  - the MF job on a file with too many malformed lines: it fails with an
#    event naming the file and line of a bad line.
set -euo pipefail
R="${TEST_SRCDIR}/ps"
PSCTL="$R/tools/psctl/psctl"
source "$R/tests/mf_model.sh"
RUN="${TEST_TMPDIR}/cluster"
D="${TEST_TMPDIR}/data"
psctl() { "$PSCTL" --run_dir "$RUN" --timeout 20 "$@"; }
dump_logs() {
  for f in "$RUN"/logs/*.log; do echo "=== $f"; tail -n 20 "$f"; done
}
trap 'psctl cluster down >/dev/null 2>&1 || true' EXIT
mkdir -p "$D/ctr" "$D/ml"
"$R/tools/data/criteo_gen" --out_dir="$D/ctr" --train_lines=20000 \
  --test_lines=5000 --max_vocab=30 --progress=false > "$D/ctr/truth.out"
"$R/tools/data/movielens_gen" --out_dir="$D/ml" --train_lines=20000 \
  --test_lines=5000 --users=200 --items=300 --progress=false > "$D/ml/truth.out"
true_auc=$(sed -n 's/.*"true_test_auc": \([0-9.]*\).*/\1/p' "$D/ctr/truth.json")
floor=$(sed -n 's/.*"noise_floor_rmse": \([0-9.]*\).*/\1/p' "$D/ml/truth.json")

psctl cluster up --servers 2 --workers 2 --bin_dir "$R" \
  --worker_flag=--report_every_steps=20 || { dump_logs; exit 1; }

fields=""
for i in $(seq 1 26); do fields="$fields\"C$i\", "; done
fields="${fields%, }"
inputs=""
for i in $(seq 1 26); do inputs="$inputs inputs { name: \"C$i\" }"; done
cat > "$TEST_TMPDIR/fm.pbtxt" <<EOT
name: "e2e-fm-bsp"
model {
  sparse_tables { name: "fm_v" dim: 8 }
  sparse_tables { name: "fm_w" dim: 1 }
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
optimizer { kind: ADAM learning_rate: 0.03 }
consistency { model: BSP }
data {
  format: CRITEO
  train_files: "$D/ctr/train.txt"
  test_files: "$D/ctr/test.txt"
  batch_size: 128
  epochs: 2
  shuffle_buffer: 10000
}
num_workers: 2
seed: 1
EOT

mf_spec() {  # name train_file epochs
  cat <<EOT
name: "$1"
$(mf_model)
optimizer { kind: ADAM learning_rate: 0.03 }
consistency { model: BSP }
data {
  format: MOVIELENS
  train_files: "$2"
  test_files: "$D/ml/test.txt"
  batch_size: 128
  epochs: $3
  shuffle_buffer: 10000
}
num_workers: 2
seed: 1
EOT
}
mf_spec e2e-mf-bsp "$D/ml/train.txt" 4 > "$TEST_TMPDIR/mf.pbtxt"

# The last value of metric $2 in job $1's metrics.
last_metric() {
  psctl metrics "$1" --format csv |
    awk -F, -v m="$2" '$2 == m { v = $7 } END { print v }'
}

for job_file in fm mf; do
  job=$(psctl submit "$TEST_TMPDIR/$job_file.pbtxt" | head -n1)
  if ! psctl wait "$job"; then
    psctl events "$job" || true
    dump_logs
    echo "FAIL: $job_file job $job did not succeed"; exit 1
  fi
  if [[ $job_file == fm ]]; then
    auc=$(last_metric "$job" test_auc)
    echo "FM BSP: test AUC $auc, the generator's true AUC $true_auc"
    awk -v a="$auc" -v t="$true_auc" 'BEGIN { exit !(a > 0.7 && a > t - 0.1) }' ||
      { echo "FAIL: test AUC $auc too low"; exit 1; }
    [[ -n $(last_metric "$job" test_logloss) ]] ||
      { echo "FAIL: no test_logloss"; exit 1; }
    [[ $(last_metric "$job" bad_lines) == 0 ]] ||
      { echo "FAIL: bad_lines not reported as 0"; exit 1; }
    psctl status "$job" | grep -q "metric  *test AUC 0\." ||
      { psctl status "$job"; echo "FAIL: status shows no test AUC"; exit 1; }
  else
    rmse=$(last_metric "$job" test_rmse)
    echo "MF BSP: test RMSE $rmse, the noise floor $floor"
    awk -v r="$rmse" 'BEGIN { exit !(r > 0 && r < 0.95) }' ||
      { echo "FAIL: test RMSE $rmse too high"; exit 1; }
  fi
done

# One line in five malformed: far past the 0.1% limit.
bad="$D/ml/bad.txt"
head -n 200 "$D/ml/train.txt" |
  awk '{ print } NR % 4 == 0 { print "1\t2\tthree\t4" }' > "$bad"
mf_spec e2e-mf-bad "$bad" 1 > "$TEST_TMPDIR/bad.pbtxt"
sed -i 's/batch_size: 128/batch_size: 16/' "$TEST_TMPDIR/bad.pbtxt"
job=$(psctl submit "$TEST_TMPDIR/bad.pbtxt" | head -n1)
if psctl wait "$job"; then
  echo "FAIL: the job on a file of bad lines succeeded"; exit 1
fi
psctl events "$job" > "$TEST_TMPDIR/bad_events.txt"
grep -q "worker_failure.*bad lines out of .*$bad:5: rating 'three'" \
  "$TEST_TMPDIR/bad_events.txt" ||
  { cat "$TEST_TMPDIR/bad_events.txt"; echo "FAIL: no event naming $bad:5"; exit 1; }
psctl status "$job" | grep -q FAILED ||
  { psctl status "$job"; echo "FAIL: job not FAILED"; exit 1; }
echo "PASS"
