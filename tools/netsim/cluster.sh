#!/usr/bin/env bash
# A ps cluster across simulated hosts (tools/netsim/netsim.sh): one daemon
# per host, each in its host's network namespace, listening on and
# advertising its host's 198.18.x.y address, the way a multi-host deployment
# (Slurm, Kubernetes) starts them; not `psctl cluster up`'s loopback cluster.
#
#   h0                      coordinator  --host=198.18.0.1 --advertise_address
#   h1 .. hS                ps_server    --host=<its address> --coordinator=ADDR
#   hS+1 .. hS+W            ps_worker    --coordinator=ADDR (CPU)
#
#   cluster.sh up [--servers S] [--workers W] [--rate RATE] [--bin_dir DIR]
#                 [--delay_us US] [--coordinator_flag=F] [--server_flag=F]
#                 [--worker_flag=F]
#   cluster.sh psctl ARGS...    psctl on h0, --coordinator=ADDR (e.g.
#                               `cluster.sh psctl submit job.pbtxt`)
#   cluster.sh status           hosts and members
#   cluster.sh down             SIGTERM to every daemon (10 s), then the hosts
#                               and whatever still runs on them are removed
#   cluster.sh net ARGS...      netsim.sh on this cluster's hosts (shape,
#                               cut, restore, partition, heal, addr,
#                               exec, status)
#
# State (pids, logs, token, the coordinator's address, the hosts) is in
# $NETSIM_CLUSTER_DIR (default /tmp/netsim-cluster; --dir DIR overrides,
# first). The cluster token is random, mode 0600, passed by file. --bin_dir
# is a Bazel bin or runfiles tree (default: bazel-bin beside this script).
# --delay_us: added latency (this kernel has no netem): each worker talks to
# the others through tools/netsim/delay_proxy on its own host (gRPC's
# grpc_proxy), which delivers every byte US microseconds late in both
# directions, so a round trip between a worker and a shard or the
# coordinator takes 2*US longer; 0 runs the proxy without delay (its own
# cost). A failed `up` removes what it made; every wait is bounded. Needs
# root.
set -euo pipefail
export PATH=/usr/sbin:/sbin:/usr/bin:/bin:$PATH

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NETSIM=$here/netsim.sh
DIR=${NETSIM_CLUSTER_DIR:-/tmp/netsim-cluster}
if [[ ${1:-} == --dir ]]; then DIR=$2; shift 2; fi
export NETSIM_DIR=$DIR/net

log() { echo "netsim-cluster: $(date -u +%H:%M:%S) $*" >&2; }
die() { log "error: $*"; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
net() { "$NETSIM" "$@"; }

bin_of() {  # bazel path -> executable
  local b
  b=$(cat "$DIR/bin_dir")/$1
  [[ -x $b ]] || die "no $b (bazel build //server/coordinator //server:ps_server //worker:ps_worker //tools/psctl)"
  echo "$b"
}
coordinator_addr() { tr -d ' \n' <"$DIR/coordinator.addr"; }
psctl_on() {  # HOST ARGS...: psctl run on HOST, coordinator by address
  local h=$1; shift
  net exec "$h" "$(bin_of tools/psctl/psctl)" --coordinator="$(coordinator_addr)" \
    --token_file="$DIR/token" --run_dir="$DIR/psctl" --timeout 10 "$@"
}

start() {  # NAME HOST BIN ARGS...: the daemon on HOST, its pid recorded
  local name=$1 h=$2; shift 2
  # netsim.sh exec execs into the daemon: $! is the daemon's own pid.
  net exec "$h" "$@" </dev/null >>"$DIR/logs/$name.log" 2>&1 &
  echo $! >"$DIR/pids/$name.pid"
  echo "$name $h $(net addr "$h")" >>"$DIR/members"
}

# SIGTERM to each recorded daemon that still runs its binary, 10 s to exit.
stop_daemons() {
  local f p i alive
  [[ -d $DIR/pids ]] || return 0
  for f in "$DIR"/pids/*.pid; do
    [[ -e $f ]] || continue
    p=$(cat "$f")
    grep -qaE 'coordinator|ps_server|ps_worker|delay_proxy' "/proc/$p/cmdline" 2>/dev/null &&
      kill -TERM "$p" 2>/dev/null || true
  done
  for ((i = 0; i < 100; i++)); do
    alive=0
    for f in "$DIR"/pids/*.pid; do
      [[ -e $f ]] || continue
      p=$(cat "$f")
      grep -qaE 'coordinator|ps_server|ps_worker|delay_proxy' "/proc/$p/cmdline" 2>/dev/null && alive=1
    done
    ((alive)) || break
    sleep 0.1
  done
  rm -f "$DIR"/pids/*.pid
}

down() {
  stop_daemons
  net down  # kills what is left inside the hosts, removes them
}

up() {
  local servers=1 workers=2 rate="" bin_dir="" delay_us="" cflags=() sflags=() wflags=()
  while (($#)); do
    case $1 in
      --servers) servers=$2; shift 2 ;;
      --workers) workers=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      --bin_dir) bin_dir=$2; shift 2 ;;
      --coordinator_flag=*) cflags+=("${1#*=}"); shift ;;
      --server_flag=*) sflags+=("${1#*=}"); shift ;;
      --worker_flag=*) wflags+=("${1#*=}"); shift ;;
      --delay_us) delay_us=$2; shift 2 ;;
      *) die "unknown option $1" ;;
    esac
  done
  [[ $servers =~ ^[0-9]+$ && $workers =~ ^[0-9]+$ ]] && ((servers >= 1 && workers >= 1)) ||
    die "--servers and --workers must be at least 1"
  [[ -z $delay_us || $delay_us =~ ^[0-9]+$ ]] || die "--delay_us is a number of microseconds, not $delay_us"
  [[ -n $bin_dir ]] || bin_dir=$(cd "$here/../.." && pwd)/bazel-bin
  [[ -s $DIR/net/prefix ]] && die "$DIR holds a running cluster; cluster.sh down first"
  local n=$((1 + servers + workers)) i h a k
  mkdir -p "$DIR"/{logs,pids,data,psctl}
  rm -f "$DIR/coordinator.addr" "$DIR/members"
  echo "$bin_dir" >"$DIR/bin_dir"
  bin_of server/coordinator/coordinator >/dev/null
  trap 'rc=$?; ((rc)) && { log "up failed: tearing down"; down; }; exit $rc' EXIT
  trap 'exit 143' INT TERM
  NETSIM_OWNER=${NETSIM_OWNER:-$PPID} net up "$n" $rate >/dev/null
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/token")

  a=$(net addr h0)
  start coordinator h0 "$(bin_of server/coordinator/coordinator)" --host="$a" --port=0 \
    --advertise_address="$a" --coordinator_file="$DIR/coordinator.addr" \
    --data_dir="$DIR/data/coordinator" --token_file="$DIR/token" "${cflags[@]}"
  for ((i = 0; i < 300; i++)); do
    [[ -s $DIR/coordinator.addr ]] && break
    kill -0 "$(cat "$DIR/pids/coordinator.pid")" 2>/dev/null ||
      die "the coordinator exited: $(tail -n 5 "$DIR/logs/coordinator.log")"
    sleep 0.1
  done
  [[ -s $DIR/coordinator.addr ]] || die "the coordinator did not start within 30 s"
  log "coordinator at $(coordinator_addr) on h0"

  for ((i = 0; i < servers; i++)); do
    h=h$((1 + i)); a=$(net addr "$h")
    start "server-$i" "$h" "$(bin_of server/ps_server)" --host="$a" --port=0 \
      --advertise_address="$a" --coordinator="$(coordinator_addr)" \
      --data_dir="$DIR/data/server-$i" --token_file="$DIR/token" --threads=2 "${sflags[@]}"
  done
  local proxy=()
  for ((i = 0; i < workers; i++)); do
    h=h$((1 + servers + i))
    if [[ -n $delay_us ]]; then
      # Its host's loopback; only the cluster's network beyond it.
      rm -f "$DIR/proxy-$i.port"
      start "proxy-$i" "$h" "$(bin_of tools/netsim/delay_proxy)" --port_file="$DIR/proxy-$i.port" \
        --delay_us="$delay_us" --allow=198.18.0.0/15 --max_seconds=86400
      for ((k = 0; k < 100; k++)); do [[ -s $DIR/proxy-$i.port ]] && break; sleep 0.05; done
      [[ -s $DIR/proxy-$i.port ]] || die "the delay proxy on $h did not start; see $DIR/logs/proxy-$i.log"
      proxy=(env "grpc_proxy=http://127.0.0.1:$(tr -d ' \n' <"$DIR/proxy-$i.port")")
    fi
    start "worker-$i" "$h" "${proxy[@]}" "$(bin_of worker/ps_worker)" --coordinator="$(coordinator_addr)" \
      --token_file="$DIR/token" --device=cpu --cpu_threads=1 --wait_spin_us=0 "${wflags[@]}"
  done

  # Every server and worker registered and ALIVE, within 60 s.
  local st s w
  for ((i = 0; i < 120; i++)); do
    st=$(psctl_on h0 cluster status 2>/dev/null || true)
    s=$(grep -cE '^[0-9]+ +SERVER .* ALIVE ' <<<"$st" || true)
    w=$(grep -cE '^[0-9]+ +WORKER .* ALIVE ' <<<"$st" || true)
    ((s >= servers && w >= workers)) && break
    for f in "$DIR"/pids/*.pid; do
      kill -0 "$(cat "$f")" 2>/dev/null || die "$(basename "$f" .pid) exited; see $DIR/logs/"
    done
    sleep 0.5
  done
  ((s >= servers && w >= workers)) ||
    die "only $s/$servers servers and $w/$workers workers registered within 60 s; see $DIR/logs/"
  log "up: $servers servers, $workers workers on $n hosts${rate:+, links at $rate}${delay_us:+, workers $delay_us us behind a delay proxy}; state in $DIR"
}

cmd=${1:-}
[[ -n $cmd ]] || usage
shift
case $cmd in
  up) up "$@" ;;
  down) down ;;
  psctl) psctl_on h0 "$@" ;;
  status)
    net status
    echo
    psctl_on h0 cluster status
    ;;
  net) net "$@" ;;
  *) usage ;;
esac
