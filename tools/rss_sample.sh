#!/usr/bin/env bash
# Samples the resident memory of a local cluster's daemons (started by
# `psctl cluster up`) until they are gone or the sampler is stopped: one CSV
# line per daemon per sample on stdout,
#   unix_seconds,name,pid,vm_rss_kib,vm_hwm_kib
# read from /proc/PID/status (VmRSS: resident now; VmHWM: the peak so far).
# A daemon the supervisor restarted shows up under its new pid.
#   tools/rss_sample.sh [RUN_DIR] [INTERVAL_S] > rss.csv
# RUN_DIR: the cluster's --run_dir (default /tmp/ps-cluster);
# INTERVAL_S: seconds between samples (default 10).
# The peak per daemon afterwards:
#   awk -F, 'NR>1 && $5>m[$2]{m[$2]=$5} END{for(d in m) print d, m[d]" KiB"}' rss.csv
set -euo pipefail
run_dir=${1:-/tmp/ps-cluster}
interval=${2:-10}
if [[ ! -d "$run_dir/pids" ]]; then
  echo "rss_sample: no $run_dir/pids: is a cluster up (psctl --run_dir=$run_dir cluster up)?" >&2
  exit 2
fi
echo "unix_seconds,name,pid,vm_rss_kib,vm_hwm_kib"
while true; do
  now=$(date +%s)
  alive=0
  for pid_file in "$run_dir"/pids/*.pid; do
    [[ -e "$pid_file" ]] || continue
    name=$(basename "$pid_file" .pid)
    pid=$(<"$pid_file") || continue
    # A pid file holds a decimal pid and a newline; anything else is skipped.
    [[ "$pid" =~ ^[0-9]+$ ]] || continue
    status=$(cat "/proc/$pid/status" 2>/dev/null) || continue
    rss=$(awk '/^VmRSS:/{print $2}' <<<"$status")
    hwm=$(awk '/^VmHWM:/{print $2}' <<<"$status")
    [[ -n "$rss" ]] || continue
    alive=1
    echo "$now,$name,$pid,$rss,$hwm"
  done
  if ((alive == 0)); then
    exit 0
  fi
  sleep "$interval"
done
