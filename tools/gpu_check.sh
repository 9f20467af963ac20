#!/usr/bin/env bash
# The CUDA path on a real GPU in one command, in bounded phases:
#
#   build    the requires-gpu tests, the kernel benchmarks and the daemons
#            (the default config, --jobs = the machine's cores)
#   tests    every test tagged requires-gpu (CUDA against the CPU backend
#            and the emulation, the layer models on cuda)
#   bench    cuBLAS sgemm at n = 1024..8192 against the GPU's published fp32
#            peak; the MLP and CNN training steps on cuda against the CPU at
#            batch 128 and 512
#   cluster  psctl cluster up with 2 servers and 2 cuda workers on the one
#            GPU, and the MLP's BSP job trained to its target accuracy
#
# Each phase stops at its time bound and the report, OUT_DIR/gpu_report.md,
# says what ran, what passed and what timed out, with the GPU, the driver,
# the CUDA versions and the commit. Where no GPU works (no nvidia-smi, no GPU
# listed, or the CUDA runtime's cudaGetDeviceCount failing) the check builds
# and prints one line saying so, and exits 0. docs/performance/gpu.md has the
# details.
#
#   tools/gpu_check.sh [OUT_DIR]                  # all phases
#   tools/gpu_check.sh --phase bench [OUT_DIR]    # one phase
#   tools/gpu_check.sh --no-build [OUT_DIR]       # all but the build
#
# Bounds in seconds (environment): GPU_CHECK_BUILD_S (300), GPU_CHECK_TESTS_S
# (45), GPU_CHECK_BENCH_S (60), GPU_CHECK_CLUSTER_S (60); they sum to under
# 8 minutes. Exit status: 0 when every phase that ran passed, or when no GPU
# was found and the build (if any) passed; 1 otherwise; 2 usage.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly ROOT
readonly BUILD_S="${GPU_CHECK_BUILD_S:-300}"
readonly TESTS_S="${GPU_CHECK_TESTS_S:-45}"
readonly BENCH_S="${GPU_CHECK_BENCH_S:-60}"
readonly CLUSTER_S="${GPU_CHECK_CLUSTER_S:-60}"
readonly PHASES=(build tests bench cluster)
JOBS="$(nproc)"
readonly JOBS

readonly KERNELS_BENCH=bazel-bin/kernels/kernels_benchmark
readonly MLP_BENCH=bazel-bin/worker/model/mlp_benchmark
readonly PSCTL=bazel-bin/tools/psctl/psctl
readonly DAEMONS=(//tools/psctl //server:ps_server //server/coordinator
  //worker:ps_worker)
readonly BENCHES=(//kernels:kernels_benchmark //worker/model:mlp_benchmark)
readonly MLP_CONFIG=configs/fashion_mnist_bsp.pbtxt
# The default config (CUDA); as tools/test.sh, without the toolkit the CUDA
# backend builds as a stub.
BAZEL_FLAGS=(--jobs="$JOBS")
if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then BAZEL_FLAGS+=(--config=nocuda); fi
readonly BAZEL_FLAGS

# The cluster's workers' device (cpu only to try the phase on a machine
# without a GPU, with this file sourced).
CLUSTER_DEVICE=cuda

# Set by main's arguments.
OUT=""
PHASE=all
NO_BUILD=0
# A requires-gpu test whose one case skips with CreateCudaBackend's reason
# where no GPU works: the check of the CUDA runtime (cudaGetDeviceCount).
CUDA_PROBE=bazel-bin/worker/model/mlp_layers_cuda_test

# Set by detect_gpu.
GPU_NAME=""
GPU_DRIVER=""
GPU_CUDA_DRIVER=""
NO_GPU_REASON=""

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  cat <<'EOF'
Options:
  --phase P        build, tests, bench, cluster, detect (only say whether a
                   GPU works) or all (the default)
  --no-build       with all: skip the build (use what bazel-bin holds)
  --cuda_probe B   the binary that checks the CUDA runtime (default
                   bazel-bin/worker/model/mlp_layers_cuda_test)
  --test_no_gpu    for //tools:gpu_check_test: run this script with
                   --no-build and fail unless it prints the one no-GPU line
                   and exits 0
EOF
}

say() { printf 'gpu_check: %s\n' "$*"; }

# Seconds since the epoch.
now() { date +%s; }

# bounded SECONDS LOG CMD...: CMD with its output in LOG, stopped by SIGINT
# (bazel's client cancels its build on it) after SECONDS and killed 20 s
# later. Returns CMD's status, 124 when it timed out.
bounded() {
  local seconds="$1" log="$2"
  shift 2
  if ((seconds <= 0)); then
    echo "not started: the phase's bound was reached" >>"$log"
    return 124
  fi
  local rc=0
  timeout -s INT -k 20 "$seconds" "$@" >>"$log" 2>&1 || rc=$?
  # 137: killed after the grace period.
  if ((rc == 137)); then rc=124; fi
  return "$rc"
}

# record PHASE RESULT SECONDS DETAIL: the phase's line in the summary.
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >"$OUT/$1.status"
}

result_of_rc() {
  case "$1" in
    0) echo PASSED ;;
    124) echo "TIMED OUT" ;;
    *) echo FAILED ;;
  esac
}

# ---------------------------------------------------------------------------
# Detection

detect_gpu() {
  local smi_reason="" cuda_reason="" cuda_state="not checked (no $CUDA_PROBE)"
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    smi_reason="nvidia-smi not found"
  else
    local smi
    if ! smi="$(timeout 30 nvidia-smi --query-gpu=name,driver_version \
      --format=csv,noheader 2>&1)"; then
      smi_reason="nvidia-smi failed: $(head -n 1 <<<"$smi")"
    elif [[ -z "$smi" ]]; then
      smi_reason="nvidia-smi lists no GPU"
    else
      GPU_NAME="$(head -n 1 <<<"$smi" | cut -d, -f1 | sed 's/ *$//')"
      GPU_DRIVER="$(head -n 1 <<<"$smi" | cut -d, -f2 | tr -d ' ')"
      GPU_CUDA_DRIVER="$(timeout 30 nvidia-smi 2>/dev/null |
        sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1 || true)"
    fi
  fi
  # The CUDA runtime, as the backend sees it; without the probe (nothing
  # built yet) nvidia-smi decides alone.
  if [[ -x "$CUDA_PROBE" ]]; then
    local probe
    probe="$(timeout 60 "$CUDA_PROBE" 2>&1)" || true
    cuda_state="works"
    if grep -q 'no usable GPU: ' <<<"$probe"; then
      cuda_reason="$(grep -m 1 -o 'no usable GPU: .*' <<<"$probe" |
        sed 's/^no usable GPU: //')"
      cuda_state="$cuda_reason"
    fi
  fi
  if [[ -n "$smi_reason" || -n "$cuda_reason" ]]; then
    # A GPU the runtime cannot use: name the driver against the toolkit.
    NO_GPU_REASON="${smi_reason:-nvidia-smi lists $GPU_NAME (driver $GPU_DRIVER, CUDA ${GPU_CUDA_DRIVER:-?})}"
    NO_GPU_REASON+="; CUDA runtime (toolkit $(cuda_toolkit_version)): "
    NO_GPU_REASON+="$cuda_state"
    return 1
  fi
  return 0
}

cuda_toolkit_version() {
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    /usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'
  else
    echo "none (no /usr/local/cuda/bin/nvcc)"
  fi
}

# fp32 (non-tensor) peak TFLOP/s from NVIDIA's datasheets, by nvidia-smi's
# name; "unknown" for other GPUs.
published_peak_tflops() {
  case "$1" in
    *H200*NVL*) echo 60 ;;
    *H200*) echo 67 ;;
    *H100*NVL*) echo 60 ;;
    *H100*PCIe*) echo 51 ;;
    *H100*HBM3* | *H100*SXM*) echo 67 ;;
    *A100*) echo 19.5 ;;
    *) echo unknown ;;
  esac
}

# ---------------------------------------------------------------------------
# Phases. Each writes OUT/<phase>.md (its part of the report) and
# OUT/<phase>.status, and returns non-zero when it did not pass.

# The requires-gpu tests, one per line, in OUT/gpu_tests.txt.
query_gpu_tests() {
  local log="$1" seconds="$2"
  local rc=0
  # --keep_going: a package that does not load hides no GPU test elsewhere.
  bounded "$seconds" "$log" bazel query --keep_going \
    'attr(tags, "requires-gpu", tests(//...))' || rc=$?
  grep '^//' "$log" >"$OUT/gpu_tests.txt" || true
  # 3: some packages failed to load; what loaded is listed.
  if ((rc == 3)) && [[ -s "$OUT/gpu_tests.txt" ]]; then rc=0; fi
  if ((rc == 0)) && [[ ! -s "$OUT/gpu_tests.txt" ]]; then
    echo "bazel query found no requires-gpu test" >>"$log"
    rc=1
  fi
  return "$rc"
}

phase_build() {
  local start log="$OUT/build.log" rc=0
  start="$(now)"
  : >"$log"
  query_gpu_tests "$log" "$BUILD_S" || rc=$?
  if ((rc == 0)); then
    local tests
    mapfile -t tests <"$OUT/gpu_tests.txt"
    # --nocache_test_results as the tests phase passes it: a change of it
    # would discard Bazel's analysis cache there.
    bounded $((BUILD_S - ($(now) - start))) "$log" bazel build \
      "${BAZEL_FLAGS[@]}" --nocache_test_results "${tests[@]}" \
      "${BENCHES[@]}" "${DAEMONS[@]}" || rc=$?
  fi
  local seconds=$(($(now) - start)) result flags
  result="$(result_of_rc "$rc")"
  flags="${BAZEL_FLAGS[*]}"
  record build "$result" "$seconds" "bound ${BUILD_S} s, $flags"
  {
    echo "## Build"
    echo
    echo "$result in $seconds s (bound $BUILD_S s), \`bazel build $flags\` of"
    echo "the requires-gpu tests ($(paste -sd' ' "$OUT/gpu_tests.txt" 2>/dev/null)),"
    echo "the benchmarks (${BENCHES[*]}) and the daemons (${DAEMONS[*]})."
    echo "Log: \`build.log\`."
    if ((rc != 0)); then
      echo
      echo '```'
      tail -n 20 "$log"
      echo '```'
    fi
  } >"$OUT/build.md"
  return "$rc"
}

phase_tests() {
  local start log="$OUT/tests.log" rc=0
  start="$(now)"
  : >"$log"
  if [[ ! -s "$OUT/gpu_tests.txt" ]]; then
    query_gpu_tests "$log" "$TESTS_S" || rc=$?
  fi
  local tests=()
  if ((rc == 0)); then
    mapfile -t tests <"$OUT/gpu_tests.txt"
    # Outside the sandbox: the tests open /dev/nvidia*.
    bounded $((TESTS_S - ($(now) - start))) "$log" bazel test \
      "${BAZEL_FLAGS[@]}" --strategy=TestRunner=local --nocache_test_results \
      --test_summary=short --test_output=errors "${tests[@]}" || rc=$?
  fi
  local seconds=$(($(now) - start)) rows="" t status testlog passed skipped
  local testlogs=()
  for t in "${tests[@]}"; do
    status="$(grep -E "^$t +" "$log" | awk '{print $2}' | head -n 1 || true)"
    testlog="bazel-testlogs/$(sed 's|^//||; s|:|/|' <<<"$t")/test.log"
    testlogs+=("$testlog")
    passed="$(grep -c '^\[       OK \]' "$testlog" 2>/dev/null || true)"
    skipped="$(grep -c '^\[  SKIPPED \]' "$testlog" 2>/dev/null || true)"
    rows+="| \`$t\` | ${status:-not run} | ${passed:-0} | ${skipped:-0} |"$'\n'
    # A case that skipped on a machine with a GPU checked nothing.
    if [[ "${skipped:-0}" != 0 ]] && ((rc == 0)); then rc=1; fi
  done
  local result
  result="$(result_of_rc "$rc")"
  {
    echo "## requires-gpu tests"
    echo
    echo "$result in $seconds s (bound $TESTS_S s); a skipped case fails the"
    echo "phase. Log: \`tests.log\`."
    echo
    echo "| test | bazel | cases passed | cases skipped |"
    echo "|---|---|---|---|"
    printf '%s' "$rows"
    if ((rc != 0)); then
      echo
      echo '```'
      grep -E 'FAILED|TIMEOUT|ERROR' "$log" | head -n 20
      grep -h -m 1 'no usable GPU' "${testlogs[@]}" 2>/dev/null || true
      echo '```'
    fi
  } >"$OUT/tests.md"
  record tests "$result" "$seconds" "${#tests[@]} tests, bound ${TESTS_S} s"
  return "$rc"
}

# bench_run NAME BINARY ARGS...: one benchmark run into OUT/bench/NAME.json
# within the bench phase's remaining time ($bench_deadline).
bench_run() {
  local name="$1" binary="$2"
  shift 2
  bounded $((bench_deadline - $(now))) "$OUT/bench.log" "$binary" \
    --benchmark_out="$OUT/bench/$name.json" --benchmark_out_format=json "$@"
}

# The markdown tables from the benchmarks' JSON.
bench_tables() {
  python3 - "$OUT/bench" "$1" <<'EOF'
import json, os, sys

out, peak = sys.argv[1], sys.argv[2]

def runs(name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return []
    try:
        with open(path) as f:
            return json.load(f).get("benchmarks", [])
    except ValueError:
        return []

print("### cuBLAS sgemm (fp32, TF32 off)\n")
print("Published fp32 peak: %s\n" % (peak + " TFLOP/s" if peak != "unknown"
                                     else "unknown for this GPU"))
print("| n | GFLOP/s | of peak |")
print("|---|---|---|")
for b in runs("sgemm"):
    n = b["name"].split("/")[1].replace("n:", "")
    if b.get("error_occurred"):
        print("| %s | error: %s | |" % (n, b.get("error_message", "")))
        continue
    g = b["GFLOP/s"]
    share = "%.0f%%" % (100 * g / (1000 * float(peak))) if peak != "unknown" else "-"
    print("| %s | %.0f | %s |" % (n, g, share))

print("\n### Training steps, ms (median)\n")
print("| model | batch | cpu | cuda | cpu / cuda |")
print("|---|---|---|---|---|")
for model in ("mlp", "cnn"):
    for batch in ("128", "512"):
        ms = {}
        for b in runs("%s_%s" % (model, batch)):
            dev = "cuda" if "Cuda" in b["name"] else "cpu"
            ms[dev] = ("error: " + b.get("error_message", "")
                       if b.get("error_occurred") else b["step_ms_median"])
        cells = [("%.3f" % ms[d]) if isinstance(ms.get(d), float)
                 else ms.get(d, "not run") for d in ("cpu", "cuda")]
        ratio = ("%.1fx" % (ms["cpu"] / ms["cuda"])
                 if all(isinstance(ms.get(d), float) for d in ("cpu", "cuda"))
                 else "-")
        print("| %s | %s | %s | %s | %s |" % (model.upper(), batch, cells[0],
                                              cells[1], ratio))
EOF
}

phase_bench() {
  local start rc=0 r=0 peak
  start="$(now)"
  bench_deadline=$((start + BENCH_S))
  mkdir -p "$OUT/bench"
  rm -f "$OUT/bench"/*.json
  : >"$OUT/bench.log"
  peak="$(published_peak_tflops "$GPU_NAME")"
  local binary
  for binary in "$KERNELS_BENCH" "$MLP_BENCH"; do
    if [[ ! -x "$binary" ]]; then
      echo "missing $binary: run --phase build first" >>"$OUT/bench.log"
      rc=1
    fi
  done
  if ((rc == 0)); then
    bench_run sgemm "$KERNELS_BENCH" --benchmark_filter='BM_CudaSgemmSquare' \
      --benchmark_min_time=0.2 || r=$?
    ((rc == 0)) && rc=$r
    # The CPU side gets every core.
    local batch
    for batch in 128 512; do
      r=0
      bench_run "mlp_$batch" "$MLP_BENCH" --batch="$batch" \
        --blas_threads="$JOBS" --benchmark_min_time=0.3 \
        --benchmark_filter='BM_(Cpu|Cuda)MlpTrainStep' || r=$?
      ((rc == 0)) && rc=$r
      r=0
      bench_run "cnn_$batch" "$KERNELS_BENCH" --batch="$batch" \
        --blas_threads="$JOBS" --benchmark_min_time=0.3 \
        --benchmark_filter='BM_(Cpu|Cuda)CnnTrainStep' || r=$?
      ((rc == 0)) && rc=$r
    done
    # A CUDA case that reports an error ran nothing on the GPU.
    if ((rc == 0)) && grep -q 'ERROR OCCURRED' "$OUT/bench.log"; then rc=1; fi
  fi
  local seconds=$(($(now) - start)) result
  result="$(result_of_rc "$rc")"
  record bench "$result" "$seconds" "bound ${BENCH_S} s"
  {
    echo "## Benchmarks"
    echo
    echo "$result in $seconds s (bound $BENCH_S s); CPU side on $JOBS BLAS"
    echo "threads. Log: \`bench.log\`, figures: \`bench/*.json\`. Commands:"
    echo
    echo '```'
    echo "$KERNELS_BENCH --benchmark_filter=BM_CudaSgemmSquare --benchmark_min_time=0.2"
    echo "$MLP_BENCH --batch=B --blas_threads=$JOBS --benchmark_filter='BM_(Cpu|Cuda)MlpTrainStep' --benchmark_min_time=0.3"
    echo "$KERNELS_BENCH --batch=B --blas_threads=$JOBS --benchmark_filter='BM_(Cpu|Cuda)CnnTrainStep' --benchmark_min_time=0.3"
    echo '```'
    echo
    if command -v python3 >/dev/null 2>&1; then
      bench_tables "$peak" || echo "(the tables failed: see bench/*.json)"
    else
      echo "(no python3 for the tables: see bench/*.json)"
    fi
  } >"$OUT/bench.md"
  return "$rc"
}

phase_cluster() {
  local start log="$OUT/cluster.log" rc=0 run_dir="$OUT/cluster"
  local job_spec="$OUT/fashion_mnist_mlp_cuda.pbtxt" data
  start="$(now)"
  local deadline=$((start + CLUSTER_S))
  : >"$log"
  data="$(sed -n 's/^ *path: *"\(.*\)"/\1/p' "$MLP_CONFIG" | head -n 1)"
  # The MLP's BSP job with the cluster's 2 workers, over 3 epochs (the
  # schedule's length to match): it reaches 0.85 within 2 on the CPU.
  sed -e 's/^name: .*/name: "gpu-check-mlp"/' -e 's/^num_workers: .*/num_workers: 2/' \
    -e 's/^\( *\)epochs: .*/\1epochs: 3/' -e 's/total_steps: .*/total_steps: 705/' \
    "$MLP_CONFIG" >"$job_spec"
  local job="" status_text="" result
  if [[ ! -x "$PSCTL" ]]; then
    echo "missing $PSCTL: run --phase build first" >>"$log"
    rc=1
  elif [[ ! -d "$data" ]]; then
    echo "no Fashion-MNIST at $data (Debian package dataset-fashion-mnist)" >>"$log"
    rc=1
  else
    local psctl=("$PSCTL" --run_dir "$run_dir")
    rm -rf "$run_dir"
    bounded $((deadline - $(now))) "$log" "${psctl[@]}" cluster up \
      --servers 2 --workers 2 --device "$CLUSTER_DEVICE" --restart no || rc=$?
    if ((rc == 0)); then
      bounded $((deadline - $(now))) "$log" "${psctl[@]}" submit "$job_spec" \
        --wait || rc=$?
      job="$(grep -o -m 1 'job-[0-9]*' "$log" || true)"
      if [[ -n "$job" ]]; then
        status_text="$(timeout 20 "${psctl[@]}" status "$job" 2>&1 || true)"
        if ((rc == 0)) && ! grep -q ': reached after' <<<"$status_text"; then
          rc=1
        fi
      fi
    fi
    timeout 30 "${psctl[@]}" cluster down >>"$log" 2>&1 || true
  fi
  local seconds=$(($(now) - start))
  result="$(result_of_rc "$rc")"
  record cluster "$result" "$seconds" "bound ${CLUSTER_S} s"
  {
    echo "## Local cluster on $CLUSTER_DEVICE"
    echo
    echo "$result in $seconds s (bound $CLUSTER_S s): \`psctl cluster up"
    echo "--servers 2 --workers 2 --device $CLUSTER_DEVICE\`, then \`psctl submit"
    echo "fashion_mnist_mlp_cuda.pbtxt --wait\` ($MLP_CONFIG with 2 workers"
    echo "and 3 epochs). Log: \`cluster.log\`, daemons' logs: \`cluster/\`."
    echo
    echo '```'
    if [[ -n "$status_text" ]]; then echo "$status_text"; else tail -n 15 "$log"; fi
    echo '```'
  } >"$OUT/cluster.md"
  return "$rc"
}

# ---------------------------------------------------------------------------
# The report

write_report() {
  local gpu_line="$1"
  {
    echo "# GPU check"
    echo
    echo "- GPU: $gpu_line"
    echo "- driver: ${GPU_DRIVER:-none}; CUDA (driver): ${GPU_CUDA_DRIVER:-none};"
    echo "  CUDA toolkit: $(cuda_toolkit_version)"
    echo "- commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null ||
      echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null ||
      echo ' (with local changes)')"
    echo "- machine: $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "| phase | result | seconds | |"
    echo "|---|---|---|---|"
    local p
    for p in "${PHASES[@]}"; do
      if [[ -f "$OUT/$p.status" ]]; then
        awk -F'\t' '{printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4}' \
          "$OUT/$p.status"
      else
        echo "| $p | not run | | |"
      fi
    done
    for p in "${PHASES[@]}"; do
      if [[ -f "$OUT/$p.md" ]]; then
        echo
        cat "$OUT/$p.md"
      fi
    done
  } >"$OUT/gpu_report.md"
}

# One phase, with its line on stdout; its status.
run_phase() {
  local p="$1" rc=0
  "phase_$p" || rc=$?
  say "$p: $(cut -f2 "$OUT/$p.status") in $(cut -f3 "$OUT/$p.status") s"
  return "$rc"
}

# --test_no_gpu: the no-GPU path, as //tools:gpu_check_test runs it on a
# machine with no GPU.
test_no_gpu() {
  local out="${TEST_TMPDIR:-$(mktemp -d)}/gpu_check_out" output rc=0
  output="$(bash "${BASH_SOURCE[0]}" --no-build --cuda_probe "$CUDA_PROBE" \
    "$out" 2>&1)" || rc=$?
  printf '%s\n' "$output"
  local fail=""
  if ((rc != 0)); then fail=" exit status $rc, expected 0;"; fi
  if [[ "$(wc -l <<<"$output")" != 1 ]]; then fail+=" more than one line;"; fi
  if ! grep -q '^gpu_check: no GPU found: ' <<<"$output"; then
    fail+=" no 'no GPU found' line (was a GPU claimed?);"
  fi
  # The CUDA runtime was asked, not only nvidia-smi.
  if grep -q 'CUDA runtime ([^)]*): not checked' <<<"$output"; then
    fail+=" the CUDA runtime was not checked;"
  fi
  if ! grep -q '^- GPU: none' "$out/gpu_report.md" 2>/dev/null; then
    fail+=" the report does not say no GPU;"
  fi
  if [[ -n "$fail" ]]; then
    echo "FAIL:$fail" >&2
    return 1
  fi
  echo "PASS"
}

main() {
  local test_mode=0
  while (($#)); do
    case "$1" in
      --phase)
        PHASE="${2:?--phase needs a value}"
        shift 2
        ;;
      --no-build)
        NO_BUILD=1
        shift
        ;;
      --cuda_probe)
        CUDA_PROBE="${2:?--cuda_probe needs a path}"
        shift 2
        ;;
      --test_no_gpu)
        test_mode=1
        shift
        ;;
      -h | --help)
        usage
        return 0
        ;;
      -*)
        echo "gpu_check: unknown option $1" >&2
        usage >&2
        return 2
        ;;
      *)
        OUT="$1"
        shift
        ;;
    esac
  done
  case "$PHASE" in
    all | detect | build | tests | bench | cluster) ;;
    *)
      echo "gpu_check: --phase: expected build, tests, bench, cluster," \
        "detect or all, got '$PHASE'" >&2
      return 2
      ;;
  esac
  # Paths given relative to where we were started.
  if [[ "$CUDA_PROBE" != /* && -e "$CUDA_PROBE" ]]; then
    CUDA_PROBE="$PWD/$CUDA_PROBE"
  fi
  if ((test_mode)); then
    test_no_gpu
    return
  fi
  OUT="${OUT:-/tmp/gpu_check}"
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd)"
  cd "$ROOT"
  if [[ "$CUDA_PROBE" != /* ]]; then CUDA_PROBE="$ROOT/$CUDA_PROBE"; fi

  if [[ "$PHASE" == all ]]; then
    rm -f "$OUT"/*.status "$OUT"/*.md "$OUT"/*.log "$OUT/gpu_tests.txt" \
      "$OUT"/bench/*.json
  fi
  local rc=0 build_note=""
  if [[ "$PHASE" == build ]] || [[ "$PHASE" == all && "$NO_BUILD" == 0 ]]; then
    [[ -t 2 ]] && echo "gpu_check: building (bound $BUILD_S s, log $OUT/build.log)" >&2
    phase_build || rc=$?
    if [[ "$PHASE" == build ]]; then
      say "build: $(cut -f2 "$OUT/build.status") in $(cut -f3 "$OUT/build.status") s (log $OUT/build.log)"
      write_report "not checked (--phase build)"
      return "$rc"
    fi
    build_note="; build $(cut -f2 "$OUT/build.status") in $(cut -f3 "$OUT/build.status") s"
  fi

  local p
  if ! detect_gpu; then
    for p in tests bench cluster; do
      if [[ "$PHASE" == all || "$PHASE" == "$p" ]]; then
        record "$p" "not run" "" "no GPU"
      fi
    done
    write_report "none: $NO_GPU_REASON"
    say "no GPU found: $NO_GPU_REASON$build_note; report $OUT/gpu_report.md"
    return "$rc"
  fi
  local gpu_line="$GPU_NAME"
  if [[ "$PHASE" == detect ]]; then
    say "GPU found: $GPU_NAME, driver $GPU_DRIVER, CUDA $GPU_CUDA_DRIVER"
    return 0
  fi
  say "GPU: $GPU_NAME, driver $GPU_DRIVER, CUDA $GPU_CUDA_DRIVER (driver), $(cuda_toolkit_version) (toolkit)"
  [[ -n "$build_note" ]] && say "build: $(cut -f2 "$OUT/build.status") in $(cut -f3 "$OUT/build.status") s"
  for p in tests bench cluster; do
    if [[ "$PHASE" == all || "$PHASE" == "$p" ]]; then
      run_phase "$p" || rc=1
    fi
  done
  write_report "$gpu_line"
  say "report $OUT/gpu_report.md"
  return "$rc"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
