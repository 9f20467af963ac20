#!/usr/bin/env bash
# Builds the absl::Mutex TSan shim (absl_mutex_tsan.cc) and prints the path
# of the shared library to pass as LD_PRELOAD to TSan test processes:
#   shim=$(tools/sanitizers/tsan_preload.sh) &&
#   bazel test --config=tsan --test_env=LD_PRELOAD="$shim" ...
# Output: $1, default ~/.cache/ps-tsan/absl_mutex_tsan.so. Exit 1 if g++
# cannot build it (e.g. an Abseil whose inline namespace is not debian3).
set -euo pipefail
cd "$(dirname "$0")"
out=${1:-$HOME/.cache/ps-tsan/absl_mutex_tsan.so}
mkdir -p "$(dirname "$out")"
g++ -std=c++20 -O1 -fPIC -shared absl_mutex_tsan.cc -o "$out" -ldl >&2
nm -D --defined-only "$out" | grep -q _ZN4absl7debian35Mutex4LockEv ||
  { echo "tsan_preload: the shim does not define absl::debian3::Mutex::Lock" >&2; exit 1; }
echo "$out"
