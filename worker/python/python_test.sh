#!/usr/bin/env bash
# Runs the Python package's pytest suite (worker/python/tests) under Bazel:
# Debian's /usr/bin/python3 with numpy, torch and pytest (tools/setup.sh
# installs them), the package and its native module from the runfiles, and
# a local cluster of this build's binaries (tests/conftest.py).
set -euo pipefail
R="${TEST_SRCDIR}/ps"
PY=/usr/bin/python3
if ! "$PY" -c 'import numpy, torch, pytest' 2>/dev/null; then
  echo "python_test: $PY lacks numpy, torch or pytest; run tools/setup.sh" >&2
  exit 1
fi
export PS_BIN_DIR="$R"
export PYTHONPATH="$R/worker/python"
export PYTHONDONTWRITEBYTECODE=1
cd "$TEST_TMPDIR"
# Any test that hangs prints every thread's stack after 300 s.
# Arguments: test files of worker/python/tests to run (default: all but
# test_ctr_kaggle.py, a target of its own), then pytest's options.
tests=()
while (($#)) && [[ $1 == test_*.py ]]; do tests+=("$R/worker/python/tests/$1"); shift; done
((${#tests[@]})) ||
  tests=("$R/worker/python/tests" "--ignore=$R/worker/python/tests/test_ctr_kaggle.py")
exec "$PY" -m pytest -q -p no:cacheprovider -p no:hypothesispytest \
  -o faulthandler_timeout=300 --junitxml="${XML_OUTPUT_FILE:-$TEST_TMPDIR/py.xml}" \
  "${tests[@]}" "$@"
