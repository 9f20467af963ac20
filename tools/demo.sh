#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install what is missing, build,
# start a local cluster (2 servers, 4 workers; CPU here, GPU where one works),
# train Fashion-MNIST under BSP, BSP with one backup worker, ASP and SSP(3)
# with worker 3 slowed 3x, print the comparison table, write the plots, and
# stop the cluster.
#   tools/demo.sh [OUT_DIR]        (default: ./demo-out)
# Environment: DEMO_EPOCHS (default: as in configs/demo/*.pbtxt),
#              DEMO_DEVICE (cpu, cuda, cuda:N; default: auto).
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
  //server/coordinator:coordinator //worker:ps_worker
bin=$(bazel info "${flags[@]}" bazel-bin 2>/dev/null)
psctl=("$bin/tools/psctl/psctl" --run_dir "$out/cluster")

cleanup() { "${psctl[@]}" cluster down >/dev/null 2>&1 || true; }
trap cleanup EXIT
"${psctl[@]}" cluster down >/dev/null 2>&1 || true

device_flag=()
[[ -n "${DEMO_DEVICE:-}" ]] && device_flag=(--device "$DEMO_DEVICE")
"${psctl[@]}" cluster up --servers 2 --workers 4 --bin_dir "$bin" "${device_flag[@]}"
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
