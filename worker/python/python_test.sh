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
# Any test that hangs prints every thread's stack after 120 s.
exec "$PY" -m pytest -q -p no:cacheprovider -p no:hypothesispytest \
  -o faulthandler_timeout=120 --junitxml="${XML_OUTPUT_FILE:-$TEST_TMPDIR/py.xml}" \
  "$R/worker/python/tests" "$@"
