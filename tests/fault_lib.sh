# shellcheck shell=bash disable=SC2034
# Helpers for the fault tests (sourced): a local cluster through psctl, job
# progress from `psctl status`, events and metrics, and daemons killed with
# SIGKILL and restarted by hand with the flags `psctl cluster up` gave them
# (tools/psctl/local_cluster.cc; those tests start it with --restart no, so
# that no supervisor restarts them first). Every wait is bounded.
R="${TEST_SRCDIR}/ps"
PSCTL="$R/tools/psctl/psctl"
RUN="${TEST_TMPDIR}/cluster"
T="$TEST_TMPDIR"
EXTRA_PIDS=()
psctl() { "$PSCTL" --run_dir "$RUN" --timeout 20 "$@"; }
dump_logs() {
  for f in "$RUN"/logs/*.log; do echo "=== $f"; tail -n 25 "$f"; done
}
cleanup() {
  local p
  for p in "${EXTRA_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  psctl cluster down >/dev/null 2>&1 || true
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  [[ -n ${JOB:-} ]] && { psctl status "$JOB"; psctl events "$JOB"; } 2>&1 | tail -n 60
  dump_logs
  exit 1
}
pid_of() { cat "$RUN/pids/$1.pid"; }
port_of() { tr -d '[:space:]' <"$RUN/ports/$1.port"; }
coordinator_addr() { tr -d '[:space:]' <"$RUN/coordinator.addr"; }
step_of() { psctl status "$1" 2>/dev/null | awk '$1 == "progress" { split($3, a, "/"); print a[1] }'; }
state_of() { psctl status "$1" 2>/dev/null | awk '$1 == "state" { sub(":", "", $2); print $2 }'; }
# wait_step JOB N SECONDS: until the job's global step reaches N.
wait_step() {
  local end=$((SECONDS + $3)) s
  while ((SECONDS < end)); do
    s=$(step_of "$1"); [[ -n $s ]] && (( s >= $2 )) && return 0
    [[ $(state_of "$1") =~ SUCCEEDED|FAILED|CANCELLED ]] && return 1
    sleep 0.2
  done
  return 1
}
# wait_event JOB REGEX SECONDS: until `psctl events JOB` shows REGEX.
wait_event() {
  local end=$((SECONDS + $3))
  while ((SECONDS < end)); do
    psctl events "$1" 2>/dev/null | grep -Eq -- "$2" && return 0
    sleep 0.3
  done
  return 1
}
# wait_end JOB SECONDS: until the job ends; prints its final state.
wait_end() {
  local end=$((SECONDS + $2)) s=""
  while ((SECONDS < end)); do
    s=$(state_of "$1")
    [[ $s =~ SUCCEEDED|FAILED|CANCELLED ]] && { echo "$s"; return 0; }
    sleep 0.5
  done
  echo "TIMEOUT($s)"
  return 1
}
# The last test accuracy the job's evaluator reported.
final_accuracy() {
  psctl metrics "$1" --format csv | awk -F, '$2 == "test_accuracy" { v = $7 } END { print v }'
}
# Mean of the first train_loss report of each worker, and of every worker's
# reports at step >= FROM (the loss after a fault).
first_loss() {
  psctl metrics "$1" --format csv | awk -F, '$2 == "train_loss" && !($6 in f) { f[$6] = $7 }
    END { for (w in f) { s += f[w]; n++ } if (n) print s / n }'
}
loss_from_step() {
  psctl metrics "$1" --format csv | awk -F, -v from="$2" '$2 == "train_loss" && $3 >= from && !($6 in f) { f[$6] = $7 }
    END { for (w in f) { s += f[w]; n++ } if (n) print s / n }'
}
# submit SPEC_FILE: prints the job id.
submit() { psctl submit "$1" | head -n1; }
# Starts one more ps_worker by hand, as `psctl cluster up` does.
start_worker() {
  "$R/worker/ps_worker" --coordinator_file="$RUN/coordinator.addr" \
    --token_file="$RUN/token" --cpu_threads=1 --device=cpu --wait_spin_us=0 "$@" \
    >>"$RUN/logs/worker-extra.log" 2>&1 &
  EXTRA_PIDS+=($!)
}
# Restarts server-I on its old port (or on PORT: 0 picks a new one, as
# `psctl cluster up` does) and data directory.
restart_server() {
  local name="server-$1" port
  port=${2:-$(port_of "$name")}
  "$R/server/ps_server" --port="$port" \
    --port_file="$RUN/ports/$name.port" --coordinator_file="$RUN/coordinator.addr" \
    --data_dir="$RUN/data/$name" --token_file="$RUN/token" \
    >>"$RUN/logs/$name.log" 2>&1 &
  echo $! >"$RUN/pids/$name.pid"
}
# Restarts the coordinator on its old port (FLAGS may add --port=0 for a
# new one) and data directory; it rewrites the cluster's coordinator file.
restart_coordinator() {
  local port
  port=$(port_of coordinator)
  "$R/server/coordinator/coordinator" --port="$port" \
    --port_file="$RUN/ports/coordinator.port" --data_dir="$RUN/data/coordinator" \
    --coordinator_file="$RUN/coordinator.addr" \
    --token_file="$RUN/token" "$@" >>"$RUN/logs/coordinator.log" 2>&1 &
  echo $! >"$RUN/pids/coordinator.pid"
}
# Float comparison: fcmp "A < B".
fcmp() { awk "BEGIN { exit !($1) }"; }

# The leftover tests (fault_leftover_test.sh, fault_leftover_text_test.sh).
# "data N/M examples trained (x%), K skipped" -> "N M K".
data_of() {
  psctl status "$1" | awk '$1 == "data" { split($2, a, "/"); k = 0
    if ($7 == "skipped") k = $6; print a[1], a[2], k }'
}
# Kills, for good, a worker of job $1 without the evaluator role (a role
# moved to a survivor that has already finished is not exercised again, and
# the job's test metric is checked), then waits for its eviction and the
# event that policy $2 (TRAIN or SKIP) gives its leftover.
kill_worker_for_good() {
  local job=$1 policy=$2 name="" w victim
  for w in worker-0 worker-1 worker-2; do
    grep -q "job $job rank .*evaluator" "$RUN/logs/$w.log" || { name=$w; break; }
  done
  [[ -n $name ]] || fail "no worker without the evaluator role"
  victim=$(pid_of "$name")
  kill -9 "$victim"
  echo "killed $name (pid $victim) at step $(step_of "$job")"
  wait_event "$job" "evicted" 30 || fail "worker not evicted within 30 s"
  if [[ $policy == TRAIN ]]; then
    wait_event "$job" "data_moved" 10 || fail "no data_moved event"
    psctl events "$job" | grep -E "data_moved.*moved to member" ||
      fail "the data_moved event names no survivor"
  else
    wait_event "$job" "data_skipped" 10 || fail "no data_skipped event"
    psctl events "$job" | grep data_skipped
  fi
}
# Checks examples trained $2 and skipped $4 of $3 under policy $1.
check_leftover_counts() {
  local policy=$1 trained=$2 total=$3 skipped=$4
  if [[ $policy == TRAIN ]]; then
    ((trained == total)) || fail "trained $trained of $total examples"
    ((skipped == 0)) || fail "$skipped examples skipped under TRAIN"
  else
    ((skipped > 0)) || fail "nothing counted as skipped under SKIP"
    ((trained + skipped == total)) ||
      fail "trained $trained + skipped $skipped is not $total"
  fi
}

# Restarts daemon NAME (worker-0, server-1, coordinator) with the command
# line `psctl cluster up` recorded for it ($RUN/cmd/NAME, one argument a
# line), as a user or an init system would: a daemon started on --port=0
# comes back on another port.
restart_from_cmd() {
  local name=$1 argv
  mapfile -t argv <"$RUN/cmd/$name"
  "${argv[@]}" >>"$RUN/logs/$name.log" 2>&1 &
  echo $! >"$RUN/pids/$name.pid"
}
