#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install what is missing, build,
# start a local cluster (2 servers, 4 workers; CPU here, GPU where one works),
# and run two sync-vs-async comparisons, each with worker 3 slowed 3x:
#  1. Fashion-MNIST (MLP) under BSP, BSP with one backup worker, ASP and
#     SSP(3) (configs/demo/{bsp,bsp_backup,asp,ssp3}.pbtxt): the comparison
#     table (test accuracy) and plots in OUT_DIR/compare*;
#  2. a sparse CTR model (a factorization machine over sparse tables) on a
#     small click log generated with tools/data/criteo_gen into
#     OUT_DIR/ctr-data, under BSP and ASP (configs/demo/ctr_{bsp,asp}.pbtxt):
#     the table (test AUC) and plots in OUT_DIR/ctr-compare/, printed next
#     to the generator's true test AUC (the best any model can reach);
# then stop the cluster.
#   tools/demo.sh [OUT_DIR]        (default: ./demo-out)
# Environment: DEMO_EPOCHS (the first comparison's epochs; default: as in
#              configs/demo/*.pbtxt), DEMO_DEVICE (cpu, cuda, cuda:N;
#              default: auto), DEMO_CTR_LINES (the click log's training
#              lines; default 1000000; 0 skips the second comparison;
#              the jobs run configs/demo/ctr_*.pbtxt's max_steps either way),
#              DEMO_DASHBOARD_PORT (the coordinator's web page, whose
#              address `cluster up` prints: 0 a free port, the default;
#              -1 off).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$(realpath -m "${1:-demo-out}")
mkdir -p "$out"

tools/setup.sh

flags=()
if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "demo: no CUDA toolkit at /usr/local/cuda: building with --config=nocuda (CPU workers)"
  flags+=(--config=nocuda)
fi
echo "demo: building (the first build takes a few minutes) ..."
bazel build "${flags[@]}" //tools/psctl:psctl //server:ps_server \
  //server/coordinator:coordinator //worker:ps_worker //tools/data:criteo_gen
bin=$(bazel info "${flags[@]}" bazel-bin 2>/dev/null)
psctl=("$bin/tools/psctl/psctl" --run_dir "$out/cluster")

cleanup() { "${psctl[@]}" cluster down >/dev/null 2>&1 || true; }
trap cleanup EXIT
"${psctl[@]}" cluster down >/dev/null 2>&1 || true

device_flag=()
[[ -n "${DEMO_DEVICE:-}" ]] && device_flag=(--device "$DEMO_DEVICE")
# Prints "dashboard: http://127.0.0.1:PORT/?token=...": the jobs' live
# curves, events and explanations in a browser while the demo runs.
"${psctl[@]}" cluster up --servers 2 --workers 4 --bin_dir "$bin" "${device_flag[@]}" \
  --dashboard_port "${DEMO_DASHBOARD_PORT:-0}"
"${psctl[@]}" cluster status

jobs=()
start=$(date +%s)
for mode in bsp bsp_backup asp ssp3; do
  spec=configs/demo/$mode.pbtxt
  if [[ -n "${DEMO_EPOCHS:-}" ]]; then
    spec=$out/$mode.pbtxt
    sed "s/^  epochs: .*/  epochs: $DEMO_EPOCHS/" "configs/demo/$mode.pbtxt" > "$spec"
  fi
  echo
  echo "demo: $mode ($(grep -m1 '^# ' configs/demo/$mode.pbtxt | cut -c3-))"
  job=$("${psctl[@]}" submit "$spec" | head -n1)
  jobs+=("$job")
  "${psctl[@]}" wait "$job" || echo "demo: job $job did not succeed (see: psctl events $job)"
done
echo
echo "demo: trained 4 jobs in $(( $(date +%s) - start )) s"
echo
"${psctl[@]}" compare "${jobs[@]}" --out "$out/compare" | tee "$out/compare.txt"
for j in "${jobs[@]}"; do
  "${psctl[@]}" metrics "$j" --format csv > "$out/metrics-$j.csv"
  "${psctl[@]}" events "$j" > "$out/events-$j.txt"
done
echo
echo "demo: table $out/compare.txt, plots $out/compare.png and $out/compare.svg"

# The second comparison: a sparse CTR model, BSP against ASP.
ctr_lines=${DEMO_CTR_LINES:-1000000}
[[ "$ctr_lines" == 0 ]] && exit 0
data=$out/ctr-data
echo
echo "demo: generating a click log ($ctr_lines training lines) in $data ..."
mkdir -p "$data"
"$bin/tools/data/criteo_gen" --out_dir="$data" --train_lines="$ctr_lines" \
  --test_lines=10000 --max_vocab=100 --seed=1 --progress=false >/dev/null
true_auc=$(sed -n 's/.*"true_test_auc": \([0-9.]*\).*/\1/p' "$data/truth.json")
ctr_jobs=()
start=$(date +%s)
for mode in ctr_bsp ctr_asp; do
  spec=$out/$mode.pbtxt
  sed "s|/tmp/demo-ctr/|$data/|" "configs/demo/$mode.pbtxt" > "$spec"
  echo
  echo "demo: $mode ($(grep -m1 '^# ' configs/demo/$mode.pbtxt | cut -c3-))"
  job=$("${psctl[@]}" submit "$spec" | head -n1)
  ctr_jobs+=("$job")
  "${psctl[@]}" wait "$job" || echo "demo: job $job did not succeed (see: psctl events $job)"
done
echo
echo "demo: trained 2 CTR jobs in $(( $(date +%s) - start )) s"
echo
cmp=$out/ctr-compare
mkdir -p "$cmp"
"${psctl[@]}" compare "${ctr_jobs[@]}" --out "$cmp/compare" | tee "$cmp/compare.txt"
echo "true model's test AUC (criteo_gen, $data/truth.json): $true_auc" |
  tee -a "$cmp/compare.txt"
for j in "${ctr_jobs[@]}"; do
  "${psctl[@]}" metrics "$j" --format csv > "$cmp/metrics-$j.csv"
  "${psctl[@]}" events "$j" > "$cmp/events-$j.txt"
done
echo
echo "demo: table $cmp/compare.txt, plots $cmp/compare.png and $cmp/compare.svg"
