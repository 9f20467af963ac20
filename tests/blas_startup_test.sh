#!/usr/bin/env bash
# The BLAS start-up check in real processes: OpenBLAS really loaded with its
# generic core (as on a CPU it does not recognise) is corrected by a restart
# of the same process, to the core that fits the CPU, and sgemm gets faster;
# with the check off it stays generic (so the correction is the check's);
# a user's OPENBLAS_CORETYPE is kept; a restart that does not take is said
# and not repeated. Then the real mains: ps_worker logs the check's line and
# kernels_benchmark names the core in its header.
set -uo pipefail
R="${TEST_SRCDIR}/ps"
T="$TEST_TMPDIR"
CHILD="$R/tests/blas_check_child"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
field() {  # field NAME LINE: the value of NAME=... in LINE
  sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"
}
# run NAME ARGS...: runs the child with a fresh record; sets starts, final.
run() {
  local name=$1; shift
  rm -f "$T/$name.rec"
  env -u OPENBLAS_CORETYPE -u PS_BLAS_CHECK_RESTARTED_FROM \
    -u PS_TEST_FORCED_GENERIC "$@" --record="$T/$name.rec" 2>"$T/$name.err"
  local rc=$?
  [[ $rc == 0 ]] || fail "$name: exit $rc: $(cat "$T/$name.err")"
  mapfile -t starts < <(grep '^start' "$T/$name.rec")
  final=$(grep '^final' "$T/$name.rec")
  echo "--- $name"; cat "$T/$name.rec" "$T/$name.err"
}
same_pid() {  # same_pid NAME: every start and the outcome in one process
  local pids
  pids=$(grep -o 'pid=[0-9]*' "$T/$1.rec" | sort -u | wc -l)
  [[ $pids == 1 ]] || fail "$1: the restart changed the pid: $(cat "$T/$1.rec")"
}
has() {  # has NAME TEXT: TEXT in NAME's log line
  grep -qF -- "$2" "$T/$1.err" || fail "$1: no '$2' in: $(cat "$T/$1.err")"
}

# The control first: forced generic, check off.
run off "$CHILD" --force_generic --blas_check=false
best=$(field best "$final")
[[ ${#starts[@]} == 2 ]] || fail "off: ${#starts[@]} starts, want 2 (the forcing one and the forced one)"
[[ $(field core "${starts[1]:-}") == Prescott ]] ||
  fail "off: the forced start did not load OpenBLAS on Prescott: ${starts[1]:-none}"
[[ $(field openblas "$final") == Prescott ]] || fail "off: not Prescott at the end: $final"
has off "not checked (--blas_check=false)"
slow_ms=$(field sgemm512_cpu_ms "$final")
same_pid off

# The check on: the same forcing, then the check's own restart.
run fix "$CHILD" --force_generic
[[ $(field core "${starts[1]:-}") == Prescott ]] ||
  fail "fix: the forced start did not load OpenBLAS on Prescott: ${starts[1]:-none}"
same_pid fix
if [[ -z $best ]]; then
  # A CPU without AVX: nothing to correct, and the check says so.
  [[ ${#starts[@]} == 2 ]] || fail "fix: ${#starts[@]} starts on a CPU without AVX, want 2"
  has fix "nothing better than the generic kernels"
else
  [[ ${#starts[@]} == 3 ]] || fail "fix: ${#starts[@]} starts, want 3 (forcing, forced, corrected)"
  [[ $(field core "${starts[2]:-}") == "$best" ]] ||
    fail "fix: the restarted process loaded OpenBLAS on '$(field core "${starts[2]:-}")', want $best"
  [[ $(field openblas "$final") == "$best" && $(field core "$final") == "$best" ]] ||
    fail "fix: ends on '$(field openblas "$final")', want $best"
  has fix "OpenBLAS had chosen Prescott, a fallback; restarted with OPENBLAS_CORETYPE=$best"
  # The correction is worth it: generic SSE sgemm is about 3x slower than
  # AVX2/AVX-512 kernels (single thread, CPU time); 1.5x leaves room.
  fast_ms=$(field sgemm512_cpu_ms "$final")
  awk -v s="$slow_ms" -v f="$fast_ms" 'BEGIN { exit !(s >= 1.5 * f) }' ||
    [[ $best == Sandybridge ]] ||
    fail "sgemm 512^3 on $best took ${fast_ms} ms of CPU, on Prescott ${slow_ms} ms: not 1.5x faster"
fi

# A user's choice is kept, even a slow one.
run user env OPENBLAS_CORETYPE=Prescott "$CHILD"
[[ ${#starts[@]} == 1 && $(field openblas "$final") == Prescott ]] ||
  fail "user: the user's OPENBLAS_CORETYPE=Prescott was not kept: $final"
has user "OPENBLAS_CORETYPE=Prescott from the environment, kept"

# A restart whose core did not take (OpenBLAS ignores a name it does not
# know): said, and no second restart.
run nottaken env OPENBLAS_CORETYPE=NoSuchCore PS_BLAS_CHECK_RESTARTED_FROM=Prescott "$CHILD"
[[ ${#starts[@]} == 1 ]] || fail "nottaken: ${#starts[@]} starts, want 1 (no loop)"
has nottaken "did not take OPENBLAS_CORETYPE=NoSuchCore after a restart"

# As OpenBLAS chooses on this machine: never left on a fallback when the CPU
# has better (on a CPU OpenBLAS does not know, this restarts for real).
run native "$CHILD"
if [[ -n $best ]]; then
  [[ $(field openblas "$final") != Prescott ]] || fail "native: left on Prescott"
fi
same_pid native

# The real mains. ps_worker checks before anything else (here it then stops:
# no --coordinator).
env -u OPENBLAS_CORETYPE "$R/worker/ps_worker" 2>"$T/worker.err"
echo "--- ps_worker"; cat "$T/worker.err"
grep -q "^worker: blas: OpenBLAS core " "$T/worker.err" || fail "ps_worker: no blas line"
grep -q -- "no coordinator: give --coordinator" "$T/worker.err" || fail "ps_worker: did not go on after the check"
"$R/kernels/kernels_benchmark" --benchmark_filter='BM_CblasSgemm/m:128/n:10/' \
  --benchmark_min_time=0.001 >"$T/bench.out" 2>&1
echo "--- kernels_benchmark"; cat "$T/bench.out"
grep -q "^blas_core: $(field openblas "$final")\$" "$T/bench.out" ||
  fail "kernels_benchmark: no 'blas_core: $(field openblas "$final")' in its header"

if ((fails > 0)); then echo "$fails failure(s)"; exit 1; fi
echo "all ok"
