#!/usr/bin/env bash
# A cluster of simulated hosts on one machine: each host is a network
# namespace with its own address from the RFC 2544 benchmarking range
# 198.18.0.0/15, joined by a veth pair to one Linux bridge (the "switch",
# itself in a namespace of its own). Each host's link can be shaped with tc
# (tbf, both directions), cut and restored.
#
#   netsim.sh up N [RATE]        make hosts h0..h(N-1) (N <= 64), links shaped
#                                to RATE (e.g. 1gbit) if given
#   netsim.sh down               stop the processes in them and remove them
#   netsim.sh run N [RATE] -- CMD...
#                                up, run CMD (NETSIM_DIR exported), down when
#                                CMD ends or this script is signalled
#   netsim.sh exec HOST CMD...   run CMD on HOST (its namespace; its own UTS
#                                namespace with hostname HOST)
#   netsim.sh addr HOST          HOST's address (198.18.0.1 for h0)
#   netsim.sh shape HOST RATE [BURST]   tbf on both directions of HOST's link
#   netsim.sh shape HOST none    unshaped
#   netsim.sh cut HOST           the switch port of HOST down (cable pulled)
#   netsim.sh restore HOST       and up again
#   netsim.sh partition A B      the switch drops every IP packet between
#                                hosts A and B, silently (no refusal, no
#                                ICMP): each still reaches the others
#   netsim.sh heal A B           and forwards them again
#   netsim.sh status             hosts, addresses, links, qdiscs
#   netsim.sh sweep              remove the leftovers of runs whose owner
#                                process is gone (found by name prefix)
# HOST is hI or I. RATE is tc's: 100mbit, 1gbit, 10gbit, ...
#
# Isolation: the hosts have only 127.0.0.1 and their 198.18.x.y/15 address,
# no default route, no NAT; nothing is created in the root namespace, so no
# packet can leave the bridge. Names carry a prefix unique to the run
# (nsim-<owner pid>-<pid of up>-), recorded with the host table in the state
# directory ($NETSIM_DIR, default /tmp/netsim; --dir DIR overrides), so two
# runs never collide. The owner is the process that called `up` (its parent;
# NETSIM_OWNER overrides): `sweep` removes runs whose owner has died. Every
# wait is bounded. Needs root, iproute2 and util-linux (unshare).
set -euo pipefail
export PATH=/usr/sbin:/sbin:/usr/bin:/bin:$PATH

DIR=${NETSIM_DIR:-/tmp/netsim}
if [[ ${1:-} == --dir ]]; then DIR=$2; shift 2; fi
readonly MAX_HOSTS=64
readonly NAME_RE='^nsim-([0-9]+)-([0-9]+)-(sw|h[0-9]+)$'

die() { echo "netsim: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }

prefix() { [[ -s $DIR/prefix ]] || die "no simulation in $DIR (netsim.sh up N)"; cat "$DIR/prefix"; }
count() { cat "$DIR/n"; }
sw_ns() { echo "$(prefix)-sw"; }
host_index() {  # hI or I -> I, checked against the host count
  local h=${1#h}
  [[ $h =~ ^[0-9]+$ ]] || die "bad host '$1' (hI or I)"
  ((h < $(count))) || die "no host $1 (the simulation has $(count))"
  echo "$h"
}
host_ns() { echo "$(prefix)-h$(host_index "$1")"; }
addr_of() { local i; i=$(host_index "$1"); echo "198.18.0.$((i + 1))"; }

# tc rate (Nbit, Nkbit, Nmbit, Ngbit; decimals allowed) -> bytes per second.
rate_bytes() {
  awk -v r="$1" 'BEGIN {
    if (!match(r, /^[0-9]+(\.[0-9]+)?/)) exit 1
    v = substr(r, 1, RLENGTH); u = substr(r, RLENGTH + 1)
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9
    if (!(u in m) || v <= 0) exit 1
    printf "%d\n", v * m[u] / 8 }' || die "bad rate '$1' (e.g. 100mbit, 1gbit, 10gbit)"
}

# Kills what runs inside namespace $1 (processes started with `exec`): TERM,
# up to 5 s, then KILL. Bounded.
kill_inside() {
  local ns=$1 pids i
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [[ -n $pids ]] || return 0
  kill -TERM $pids 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] || return 0
    sleep 0.1
  done
  kill -KILL $pids 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do
    [[ -n $(ip netns pids "$ns" 2>/dev/null || true) ]] || return 0
    sleep 0.1
  done
}

# Removes every namespace whose name starts with prefix $1 (hosts first, then
# the switch: deleting a namespace deletes its ends of the veth pairs).
remove_prefix() {
  local p=$1 ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$p-h[0-9]+\$" || true); do
    kill_inside "$ns"
    ip netns del "$ns" 2>/dev/null || true
  done
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$p-sw\$" || true); do
    kill_inside "$ns"
    ip netns del "$ns" 2>/dev/null || true
  done
}

shape() {  # HOST RATE [BURST] | HOST none
  local i ns sw bytes burst
  i=$(host_index "$1"); ns=$(host_ns "$1"); sw=$(sw_ns)
  if [[ $2 == none ]]; then
    tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
    tc -n "$sw" qdisc del dev "h$i" root 2>/dev/null || true
    return
  fi
  bytes=$(rate_bytes "$2")
  # Default burst: 4 ms at the rate, at least 64 KiB (one GSO segment).
  burst=${3:-$((bytes / 250 > 65536 ? bytes / 250 : 65536))}
  # Host -> switch (the host's upload) and switch -> host (its download).
  tc -n "$ns" qdisc replace dev eth0 root tbf rate "$2" burst "$burst" latency 20ms
  tc -n "$sw" qdisc replace dev "h$i" root tbf rate "$2" burst "$burst" latency 20ms
}

# Packets from host $1 to host $2 are dropped at $1's switch port: a tc
# filter (clsact ingress, u32 on the destination address) redirects them to
# a veth end that is down, which drops them. (gact's drop is not in every
# kernel; mirred is.)
partition_one() {
  local sw i j
  sw=$(sw_ns); i=$(host_index "$1"); j=$(host_index "$2")
  if ! ip -n "$sw" link show sink0 >/dev/null 2>&1; then
    ip -n "$sw" link add sink0 type veth peer name sink1
  fi
  tc -n "$sw" qdisc add dev "h$i" clsact 2>/dev/null || true
  tc -n "$sw" filter replace dev "h$i" ingress pref $((100 + j)) protocol ip \
    u32 match ip dst "$(addr_of "$2")/32" action mirred egress redirect dev sink0
}
heal_one() {
  local i j
  i=$(host_index "$1"); j=$(host_index "$2")
  tc -n "$(sw_ns)" filter del dev "h$i" ingress pref $((100 + j)) 2>/dev/null || true
}

up() {
  local n=$1 rate=${2:-} owner=${NETSIM_OWNER:-$PPID} p i ns sw
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= MAX_HOSTS)) || die "host count must be 1..$MAX_HOSTS"
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces)"
  if [[ -s $DIR/prefix ]] && ip netns list | grep -q "^$(cat "$DIR/prefix")-"; then
    die "$DIR holds a running simulation ($(cat "$DIR/prefix")); netsim.sh down first"
  fi
  p="nsim-$owner-$$"
  mkdir -p "$DIR"
  echo "$p" >"$DIR/prefix"
  echo "$n" >"$DIR/n"
  echo "$owner" >"$DIR/owner"
  : >"$DIR/hosts"
  # A failure half way removes what was made.
  trap 'rc=$?; ((rc)) && { remove_prefix "$p"; rm -f "$DIR/prefix"; }; exit $rc' EXIT
  trap 'exit 143' INT TERM
  sw="$p-sw"
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for ((i = 0; i < n; i++)); do
    ns="$p-h$i"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Both ends are created directly in their namespaces: nothing touches the
    # root namespace.
    ip link add "nsim$$-$i" netns "$ns" type veth peer name "h$i" netns "$sw"
    ip -n "$ns" link set "nsim$$-$i" name eth0
    ip -n "$ns" addr add "198.18.0.$((i + 1))/15" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$sw" link set "h$i" master br0
    ip -n "$sw" link set "h$i" up
    echo "h$i $ns 198.18.0.$((i + 1))" >>"$DIR/hosts"
  done
  [[ -z $rate ]] || for ((i = 0; i < n; i++)); do shape "h$i" "$rate"; done
  echo "$rate" >"$DIR/rate"
  echo "$DIR"
}

down() {
  local p
  [[ -s $DIR/prefix ]] || return 0
  p=$(cat "$DIR/prefix")
  remove_prefix "$p"
  rm -f "$DIR/prefix" "$DIR/n" "$DIR/owner" "$DIR/hosts" "$DIR/rate"
  rmdir "$DIR" 2>/dev/null || true
}

sweep() {
  local name owner prefix seen=" "
  while read -r name _; do
    [[ $name =~ $NAME_RE ]] || continue
    owner=${BASH_REMATCH[1]}
    prefix="nsim-$owner-${BASH_REMATCH[2]}"
    [[ $seen == *" $prefix "* ]] && continue
    seen+="$prefix "
    if ! kill -0 "$owner" 2>/dev/null; then
      echo "netsim: removing $prefix (owner $owner is gone)"
      remove_prefix "$prefix"
    fi
  done < <(ip netns list)
}

status() {
  local sw line h ns a
  sw=$(sw_ns)
  echo "prefix $(prefix), $(count) hosts, state in $DIR"
  while read -r h ns a; do
    line=$(ip -n "$sw" -br link show dev "$h" 2>/dev/null | awk '{print $2}')
    printf '%-4s %-14s %-32s link %-5s %s\n' "$h" "$a" "$ns" "${line:-?}" \
      "$(tc -n "$ns" qdisc show dev eth0 2>/dev/null | head -n1)"
  done <"$DIR/hosts"
}

cmd=${1:-}
[[ -n $cmd ]] || usage
shift
case $cmd in
  up) (($# >= 1)) || usage; up "$@" ;;
  down) down ;;
  run)
    (($# >= 3)) || usage
    n=$1; shift
    rate=""
    [[ $1 != -- ]] && { rate=$1; shift; }
    [[ ${1:-} == -- ]] || usage
    shift
    NETSIM_OWNER=$$ "$0" --dir "$DIR" up "$n" $rate >/dev/null
    child=""
    trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null; down' EXIT
    trap 'exit 143' INT TERM
    export NETSIM_DIR=$DIR
    # In the background: a signal to this script runs its trap at once
    # (bash defers traps until a foreground child ends).
    "$@" &
    child=$!
    rc=0
    wait "$child" || rc=$?
    child=""
    exit "$rc"
    ;;
  exec)
    (($# >= 2)) || usage
    ns=$(host_ns "$1"); h="h$(host_index "$1")"; shift
    exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
    ;;
  addr) (($# == 1)) || usage; addr_of "$1" ;;
  shape) (($# >= 2)) || usage; shape "$@" ;;
  cut) (($# == 1)) || usage; ip -n "$(sw_ns)" link set "h$(host_index "$1")" down ;;
  restore) (($# == 1)) || usage; ip -n "$(sw_ns)" link set "h$(host_index "$1")" up ;;
  partition)
    (($# == 2)) || usage
    [[ $(host_index "$1") != $(host_index "$2") ]] || die "partition needs two hosts"
    partition_one "$1" "$2"; partition_one "$2" "$1" ;;
  heal) (($# == 2)) || usage; heal_one "$1" "$2"; heal_one "$2" "$1" ;;
  status) status ;;
  sweep) sweep ;;
  -h|--help|help) usage 0 ;;
  *) usage ;;
esac
