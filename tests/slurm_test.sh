#!/usr/bin/env bash
# Runs the Slurm path for real on this machine: a one-node Slurm cluster
# (munged as the munge user, slurmctld, slurmd; no systemd) from a generated
# slurm.conf in a temporary directory, then
#   1. `psctl slurm submit` a small CPU training job (1 server, 1 worker,
#      30 steps); checks that the Slurm job COMPLETED with exit 0, the training
#      job SUCCEEDED, and its metrics, events and comparison were collected,
#      and that no daemon outlived the allocation;
#   2. submits a long job, scancels the allocation once the cluster is up, and
#      checks that every daemon is gone (the script's teardown on SIGTERM).
# Stops every daemon it started, whatever happens. Skips (with the reason) if
# the Slurm/munge packages are missing (tools/setup.sh --slurm installs them)
# or it is not root (slurmd must be).
#
# Under Bazel the binaries come from the runfiles; by hand:
#   PS_BIN_DIR=bazel-bin tests/slurm_test.sh
set -uo pipefail
export PATH=/usr/sbin:/sbin:/usr/bin:/bin:$PATH

start_s=$SECONDS
log() { echo "slurm_test: $(date -u +%H:%M:%S) $*"; }

TEST_XML_SUITE=slurm_test
TEST_XML_CASE=SlurmOneNodeCluster
if [[ -n ${TEST_SRCDIR:-} ]]; then
  source "$TEST_SRCDIR/ps/tests/test_xml.sh"
else
  source "$(dirname "$0")/test_xml.sh"
fi
skip() {
  log "SKIPPED: $*"
  write_xml skip "$*"
  exit 0
}

# ---- prerequisites ----------------------------------------------------------
missing=()
for c in munged munge unmunge slurmctld slurmd sbatch srun scontrol squeue sinfo scancel; do
  command -v "$c" >/dev/null || missing+=("$c")
done
((${#missing[@]} == 0)) ||
  skip "not installed: ${missing[*]} (tools/setup.sh --slurm installs slurmctld slurmd slurm-client munge)"
[[ $(id -u) -eq 0 ]] || skip "slurmd must run as root to start job steps; run the test as root"
id munge >/dev/null 2>&1 || skip "no munge user (reinstall the munge package)"

if [[ -n "${TEST_SRCDIR:-}" ]]; then
  bin=$TEST_SRCDIR/${TEST_WORKSPACE:-ps}
  src=$bin
else
  src=$(cd "$(dirname "$0")/.." && pwd)
  bin=${PS_BIN_DIR:?set PS_BIN_DIR to the bazel-bin directory}
fi
psctl=${PS_PSCTL:-$bin/tools/psctl/psctl}
[[ -x $psctl ]] || psctl=$bin/psctl
if [[ ! -x $psctl ]]; then
  log "FAIL: no psctl under $bin"
  write_xml fail "no psctl"
  exit 1
fi
if ! "$psctl" --help 2>/dev/null | grep -qE '^ +slurm( |$)'; then
  log "FAIL: psctl has no 'slurm submit' (psctl_main.cc must call AddDeployCommands)"
  write_xml fail "psctl has no slurm submit"
  exit 1
fi

tmp=$(mktemp -d /tmp/ps-slurm-test.XXXXXX)
chmod 755 "$tmp"
mkdir -p "$tmp"/{munge,etc,state,spool,run,log,out}
host=$(hostname -s)

# ---- teardown: every process we started, by pid ----------------------------
pids_of_ours() {  # processes whose command line mentions our temp dir
  local p
  for p in $(pgrep -f -- "$tmp" 2>/dev/null); do
    [[ $p != "$$" && $p != "$BASHPID" ]] && echo "$p"
  done
}
stop_pid() {  # pid [grace seconds]
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < ${2:-10} * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
}
failed=0
cleanup() {
  local rc=$?
  trap - EXIT
  export SLURM_CONF=$tmp/etc/slurm.conf
  [[ -n "${slurmctld_pid:-}" ]] && timeout 10 scancel --quiet --user="$(id -un)" 2>/dev/null
  sleep 1
  [[ -n "${slurmd_pid:-}" ]] && stop_pid "$slurmd_pid" 10
  [[ -n "${slurmctld_pid:-}" ]] && stop_pid "$slurmctld_pid" 10
  [[ -s $tmp/munge/munged.pid ]] && stop_pid "$(cat "$tmp/munge/munged.pid")" 5
  local p
  for p in $(pids_of_ours); do stop_pid "$p" 2; done
  if ((failed || rc)) && [[ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]]; then
    cp -r "$tmp/log" "$tmp/out" "$TEST_UNDECLARED_OUTPUTS_DIR/" 2>/dev/null
  fi
  if ((failed || rc)); then
    for f in "$tmp"/log/*.log "$tmp"/out/*/slurm-*.out "$tmp"/out/*/logs/*.log; do
      [[ -f $f ]] && { echo "---- $f (tail)"; tail -n 30 "$f"; }
    done
  fi
  [[ -n "${PS_SLURM_TEST_KEEP:-}" ]] || rm -rf "$tmp"
  log "daemons stopped, $tmp removed ($((SECONDS - start_s)) s)"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

fail() {
  log "FAIL: $*"
  failed=1
  write_xml fail "$*"
  exit 1
}

# ---- munge ------------------------------------------------------------------
mkdir -p "$tmp/munge-key"
dd if=/dev/urandom of="$tmp/munge-key/munge.key" bs=1024 count=1 status=none
chown -R munge:munge "$tmp/munge" "$tmp/munge-key"
chmod 755 "$tmp/munge"  # the socket's directory: every client needs x
chmod 700 "$tmp/munge-key"
chmod 600 "$tmp/munge-key/munge.key"
socket=$tmp/munge/munge.socket
runuser -u munge -- munged --socket="$socket" --key-file="$tmp/munge-key/munge.key" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
  --seed-file="$tmp/munge/munged.seed" ||
  fail "munged did not start: $(cat "$tmp/munge/munged.log" 2>/dev/null)"
munge -S "$socket" -n | unmunge -S "$socket" >/dev/null || fail "munge round trip failed"
log "munged up"

# ---- slurm.conf for this host ----------------------------------------------
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
while [[ $slurmd_port == "$ctld_port" ]]; do slurmd_port=$(free_port); done
hw=$(slurmd -C | head -n1 | sed -e 's/^NodeName=[^ ]* //' -e 's/RealMemory=\([0-9]*\)/RealMemory=\1/')
mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
hw=$(sed "s/RealMemory=$mem/RealMemory=$((mem * 9 / 10))/" <<<"$hw")
cat >"$tmp/etc/slurm.conf" <<EOF
ClusterName=pstest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/run/slurmctld.pid
SlurmdPidFile=$tmp/run/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
KillWait=10
MinJobAge=600
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=ps Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$tmp/etc/slurm.conf

slurmctld -D -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
slurmctld_pid=$!
slurmd -D -f "$SLURM_CONF" -N "$host" >"$tmp/log/slurmd.out" 2>&1 &
slurmd_pid=$!
for ((i = 0; ; i++)); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null | head -n1)
  [[ $state == idle ]] && break
  kill -0 "$slurmctld_pid" 2>/dev/null || fail "slurmctld exited: $(tail -n 5 "$tmp/log/slurmctld.out")"
  kill -0 "$slurmd_pid" 2>/dev/null || fail "slurmd exited: $(tail -n 5 "$tmp/log/slurmd.out")"
  ((i < 60)) || fail "node $host not idle after 30 s (state: ${state:-none})"
  sleep 0.5
done
log "slurmctld and slurmd up: node $host idle ($hw)"
if [[ -n "${PS_SLURM_TEST_HOLD:-}" ]]; then  # debugging: keep the cluster up
  log "holding ${PS_SLURM_TEST_HOLD}s: export SLURM_CONF=$SLURM_CONF"
  sleep "$PS_SLURM_TEST_HOLD"
fi

# ---- a small CPU job --------------------------------------------------------
spec() {  # name steps epochs -> a job spec file
  sed -e "s/^name: .*/name: \"$1\"/" -e 's/^num_workers: .*/num_workers: 1/' \
      -e 's/^    hidden: 256/    hidden: 64/' -e '/^    hidden: 128/d' \
      -e "s/^  epochs: .*/  epochs: $3\n  max_steps: $2\n  eval_examples: 2000/" \
      "$src/configs/fashion_mnist_bsp.pbtxt" >"$tmp/$1.pbtxt"
  echo "$tmp/$1.pbtxt"
}
wait_slurm_job() {  # id timeout_s -> prints the final JobState
  local id=$1 deadline=$((SECONDS + $2)) st
  while :; do
    st=$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case $st in
      PENDING | RUNNING | CONFIGURING | COMPLETING | "") ;;
      *) echo "$st"; return ;;
    esac
    ((SECONDS < deadline)) || { echo "TIMEOUT_IN_TEST($st)"; return; }
    sleep 1
  done
}
daemons_of() {  # output dir -> pids of the daemons started for it
  local p exe
  for p in $(pgrep -f -- "$1/" 2>/dev/null); do
    exe=$(tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | head -n1)
    [[ ${exe##*/} =~ ^(coordinator|ps_server|ps_worker)$ ]] && echo "$p"
  done
}

out=$tmp/out/small
submitted=$("$psctl" slurm submit "$(spec small 30 1)" --servers 1 --workers 1 \
  --host 127.0.0.1 --bin_dir "$bin" --output_dir "$out" --time 00:05:00 \
  --start_timeout 120) || fail "psctl slurm submit failed"
log "$submitted"
id=$(sed -n 's/^submitted Slurm job \([0-9]*\).*/\1/p' <<<"$submitted")
[[ -n $id ]] || fail "no Slurm job id in: $submitted"
state=$(wait_slurm_job "$id" 180)
exitcode=$(scontrol show job "$id" | sed -n 's/.*ExitCode=\([0-9:]*\).*/\1/p')
log "Slurm job $id: $state, exit $exitcode"
[[ -f $out/slurm-$id.out ]] && sed 's/^/  | /' "$out/slurm-$id.out"
[[ $state == COMPLETED && $exitcode == 0:0 ]] || fail "Slurm job $id ended $state (exit $exitcode)"
grep -q ' SUCCEEDED$' "$out/results.txt" 2>/dev/null || fail "the training job did not succeed: $(cat "$out/results.txt" 2>/dev/null)"
job=$(awk '{print $1; exit}' "$out/jobs.txt")
csv=$out/metrics-$job.csv
[[ -s $csv ]] || fail "no metrics file $csv"
head -n1 "$csv" | grep -qE '^job_id,.*value' || fail "no CSV header in $csv: $(head -n1 "$csv")"
rows=$(grep -c "^$job," "$csv")
((rows > 0)) || fail "no metric rows of $job in $csv"
grep -q "\"$job\"" "$out/metrics-$job.json" || fail "$out/metrics-$job.json does not name $job"
grep -q '"step"' "$out/metrics-$job.json" || fail "no points in $out/metrics-$job.json"
[[ -s $out/events-$job.txt ]] || fail "no events in $out/events-$job.txt"
grep -q "$job" "$out/compare.txt" || fail "compare.txt does not name $job"
[[ -s $out/ps_train.sbatch && -s $out/logs/ps-coordinator.log ]] || fail "script or daemon logs missing"
sleep 1
left=$(daemons_of "$out")
[[ -z $left ]] || fail "daemons outlived the allocation: $left"
log "job $job SUCCEEDED: $rows metric rows, events and comparison collected; no daemon left"

# ---- cancelling the allocation tears the cluster down -----------------------
out2=$tmp/out/cancel
submitted=$("$psctl" slurm submit "$(spec long 1000000 100)" --servers 1 --workers 1 \
  --host 127.0.0.1 --bin_dir "$bin" --output_dir "$out2" --time 00:05:00 \
  --start_timeout 120) || fail "psctl slurm submit (long job) failed"
id2=$(sed -n 's/^submitted Slurm job \([0-9]*\).*/\1/p' <<<"$submitted")
for ((i = 0; ; i++)); do
  [[ -s $out2/jobs.txt ]] && break
  ((i < 240)) || fail "the long job's cluster did not come up in 120 s"
  sleep 0.5
done
before=$(daemons_of "$out2" | wc -l)
((before == 3)) || fail "expected 3 daemons running for the long job, found $before"
scancel "$id2"
state=$(wait_slurm_job "$id2" 60)
for ((i = 0; i < 60; i++)); do
  [[ -z $(daemons_of "$out2") ]] && break
  sleep 0.5
done
left=$(daemons_of "$out2")
[[ -z $left ]] || fail "after scancel, daemons still running: $left"
grep -q 'tearing down' "$out2/slurm-$id2.out" || fail "the batch script did not see the cancellation"
log "scancel of job $id2 ($state): all $before daemons stopped"

write_xml pass ""
log "PASSED"
