#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine:
#   tools/test.sh                 install what is missing, build, run //...
#   tools/test.sh //common/...    only these targets
# The last line is the count of test cases: "N passed, N failed, N skipped".
# Exit status: 0 only if nothing failed (a GPU-only test that skips for want
# of a GPU is counted as skipped, not passed).
set -uo pipefail
cd "$(dirname "$0")/.."

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

targets=("$@")
((${#targets[@]})) || targets=(//...)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
bazel test "${flags[@]}" --test_summary=short "${targets[@]}" 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}
echo "test: bazel test took $(( $(date +%s) - start )) s (exit $bazel_rc)"

# Count test cases from each target's JUnit XML; a target that did not build,
# timed out or crashed without XML counts as one failure.
testlogs=$(bazel info "${flags[@]}" bazel-testlogs 2>/dev/null)
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" - "$log" "$testlogs" "$bazel_rc" <<'PYEOF'
import os, re, sys
import xml.etree.ElementTree as ET

log, testlogs, bazel_rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
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
            cases = ET.parse(path).getroot().iter("testcase")
            cases = list(cases)
        except ET.ParseError:
            cases = []
    if not cases:
        if status in ("PASSED", "FLAKY"):
            passed += 1
        else:
            failed += 1
            print(f"test: {target}: {status}")
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
        print(f"test: {target}: FAILED outside its test cases")
if not seen and bazel_rc != 0:
    failed += 1
    print("test: bazel test failed before running any test")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or bazel_rc not in (0, 4) else 0)
PYEOF
