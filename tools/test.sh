#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine:
#   tools/test.sh            install what is missing, then
#                              1. bazel test //...              (opt build)
#                              2. ASan+UBSan on a named subset  (--config=asan)
#                              3. TSan on a named subset        (--config=tsan)
#                              4. the libFuzzer targets, 20 s each
#   tools/test.sh //common/...   only step 1, on these targets
# Environment: PS_TEST_QUICK=1 skips steps 2-4.
# The last line counts test cases over every step:
#   "N passed, N failed, N skipped"
# Exit status 0 only if nothing failed. A GPU test that skips for want of a
# GPU counts as skipped, not passed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

tools/setup.sh --slurm || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }

flags=()
if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "test: no CUDA toolkit at /usr/local/cuda: building with --config=nocuda" \
       "(the CUDA backend reports UNIMPLEMENTED; its kernels still run under the host emulation)"
  flags+=(--config=nocuda)
fi
if [[ -n "${CI:-}" ]]; then
  flags+=(--curses=no --show_progress_rate_limit=60)
fi

counts=$(mktemp)
log=$(mktemp)
trap 'rm -f "$log" "$counts"' EXIT
py=/usr/bin/python3
[[ -x $py ]] || py=python3

# run_step NAME BAZEL_STARTUP_ARGS... -- BAZEL_TEST_ARGS...
# Runs `bazel test`, then counts its test cases from each target's JUnit XML
# (a target that did not build, timed out or crashed without XML counts as one
# failure) and appends "passed failed skipped" to $counts.
run_step() {
  local name=$1; shift
  local startup=()
  while [[ $1 != -- ]]; do startup+=("$1"); shift; done
  shift
  echo "test: === $name ==="
  local start=$(date +%s)
  bazel "${startup[@]}" test "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  echo "test: $name: bazel test took $(( $(date +%s) - start )) s (exit $rc)"
  local testlogs configs=()
  for a in "$@"; do [[ $a == --config=* ]] && configs+=("$a"); done
  testlogs=$(bazel "${startup[@]}" info "${configs[@]}" bazel-testlogs 2>/dev/null)
  "$py" - "$log" "$testlogs" "$rc" "$name" >> "$counts" <<'PYEOF'
import os, re, sys
import xml.etree.ElementTree as ET

log, testlogs, bazel_rc, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
passed = failed = skipped = 0
line_re = re.compile(r"^(//\S+)\s+(?:\(cached\) )?(PASSED|FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|SKIPPED|FLAKY|INCOMPLETE)")
seen = {}
for line in open(log, errors="replace"):
    m = line_re.match(line.strip())
    if m:
        seen[m.group(1)] = m.group(2)
for target, status in sorted(seen.items()):
    if status == "SKIPPED":
        skipped += 1
        continue
    path = os.path.join(testlogs, target[2:].replace(":", "/"), "test.xml")
    cases = []
    if status in ("PASSED", "FAILED", "FLAKY") and os.path.exists(path):
        try:
            cases = list(ET.parse(path).getroot().iter("testcase"))
        except ET.ParseError:
            cases = []
    if not cases:
        if status in ("PASSED", "FLAKY"):
            passed += 1
        else:
            failed += 1
            print(f"test: {name}: {target}: {status}", file=sys.stderr)
        continue
    target_failed = 0
    for c in cases:
        if c.find("failure") is not None or c.find("error") is not None:
            failed += 1
            target_failed += 1
        elif c.get("result") == "skipped" or c.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    if status == "FAILED" and target_failed == 0:
        # Crashed after its cases ran (e.g. a sanitizer report at exit).
        failed += 1
        print(f"test: {name}: {target}: FAILED outside its test cases", file=sys.stderr)
if not seen and bazel_rc not in (0, 4):
    failed += 1
    print(f"test: {name}: bazel test failed before running any test", file=sys.stderr)
print(passed, failed, skipped)
PYEOF
}

targets=("$@")
if ((${#targets[@]})); then
  run_step "tests" -- "${flags[@]}" --test_summary=short "${targets[@]}"
else
  run_step "tests" -- "${flags[@]}" --test_summary=short //...

  if [[ -z "${PS_TEST_QUICK:-}" ]]; then
    # Sanitizer builds use their own output bases (both are -c dbg and would
    # otherwise overwrite each other's outputs) and never CUDA: the CUDA
    # objects are not instrumented and need a GPU to run. The subsets cover
    # every library and the multi-process data path; the rest of //tests
    # runs in step 1 only (CI time).
    # --symlink_prefix=/: leave the workspace's bazel-* links to step 1's
    # output base (a link into another one would be walked as a package).
    # --build_tests_only: the benchmarks in those packages are not built here.
    # Not //worker/python: its native module is loaded by Debian's
    # uninstrumented Python, which cannot take a sanitizer runtime.
    san_flags=(--config=nocuda --keep_going --test_summary=short --symlink_prefix=/
               --build_tests_only)
    [[ -n "${CI:-}" ]] && san_flags+=(--curses=no --show_progress_rate_limit=60)
    run_step "asan" --output_base="$HOME/.cache/bazel-ps-asan" -- \
      --config=asan "${san_flags[@]}" \
      --test_env=LSAN_OPTIONS=suppressions="$root/tools/sanitizers/lsan.supp" \
      --test_env=UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions="$root/tools/sanitizers/ubsan.supp" \
      -- //common/... //kernels/... //server/... //worker/... -//worker/python/... \
      //tools/psctl:report_test \
      //tests:parameter_client_grpc_test \
      //tests:ps_server_grpc_test //tests:ps_server_bad_input_test \
      //tests:coordinator_lifecycle_test //tests:coordinator_bad_input_test \
      //tests:e2e_train_test

    # Debian's Abseil is not built with TSan, so absl::Mutex is invisible to
    # it; tools/sanitizers/absl_mutex_tsan.cc (LD_PRELOAD) tells TSan about
    # every Mutex/CondVar operation, and tsan.supp covers the other
    # uninstrumented system libraries only. The hash reruns the tests when
    # the shim changes (its path does not).
    if shim=$(tools/sanitizers/tsan_preload.sh); then
      run_step "tsan" --output_base="$HOME/.cache/bazel-ps-tsan" -- \
        --config=tsan "${san_flags[@]}" \
        --test_env=LD_PRELOAD="$shim" \
        --test_env=PS_TSAN_SHIM_SHA256="$(sha256sum "$shim" | cut -c1-64)" \
        --test_env=TSAN_OPTIONS=suppressions="$root/tools/sanitizers/tsan.supp":halt_on_error=1:second_deadlock_stack=1 \
        -- //tools/sanitizers:all //common/... //server/... //worker/... \
        -//worker/python/... \
        //kernels:cuda_emulated_backend_test //kernels:cpu_backend_test \
        //tests:parameter_client_grpc_test \
        //tests:ps_server_grpc_test //tests:coordinator_lifecycle_test \
        //tests:e2e_train_test
    else
      echo "test: the TSan shim did not build" >&2
      echo "0 1 0" >> "$counts"
    fi

    echo "test: === fuzz ==="
    fuzz_start=$(date +%s)
    # One passed per target that ran clean; a crash or a build failure is a
    # failure.
    fuzz_log=$(mktemp)
    tools/fuzz/run.sh 20 | tee "$fuzz_log"
    fuzz_rc=${PIPESTATUS[0]}
    fuzz_ok=$(grep -c '^fuzz: [a-z_]* ok$' "$fuzz_log")
    echo "$fuzz_ok $((fuzz_rc != 0)) 0" >> "$counts"
    rm -f "$fuzz_log"
    echo "test: fuzz took $(( $(date +%s) - fuzz_start )) s"
  fi
fi

read -r passed failed skipped < <(awk '{p += $1; f += $2; s += $3} END {print p+0, f+0, s+0}' "$counts")
echo "test: per step (passed failed skipped): $(tr '\n' ';' < "$counts")"
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
