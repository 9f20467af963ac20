#!/usr/bin/env bash
# A ps cluster across simulated hosts (tools/netsim): S+3 network namespaces
# with addresses 198.18.0.1.., one bridge, every link shaped to 1 Gbit/s with
# tbf; coordinator on h0, S ps_servers on h1..hS, two ps_workers on the next
# two hosts, each started in its host's namespace on its host's address
# (tools/netsim/cluster.sh), psctl run on h0 with --coordinator=ADDR.
#  1. The coordinator and the servers are registered at their hosts'
#     addresses (psctl cluster status), both workers ALIVE.
#  2. A short Fashion-MNIST MLP job SUCCEEDS under each model of --models,
#     and the workers' connections to server 0 run from their own addresses
#     across the bridge.
#  3. --cut worker: the last worker host's link is cut mid-job: the worker
#     is evicted, the job SUCCEEDS on the survivor; restored, the worker is
#     ALIVE again.
#     --cut server: server 0's host's link is cut mid-job for longer than
#     the heartbeat timeout: server_failure, the workers stall; restored,
#     the coordinator sees it back (server_recovered: the shard kept its
#     state) and the job SUCCEEDS.
#     --cut backup (3 servers, jobs with replication factor 2): the hosts
#     of servers 0 and 1 are partitioned from each other mid-job, silently
#     (netsim.sh partition), while the coordinator and the workers reach
#     both: the shard whose primary and backup they hold drops that backup
#     (backup_lost: its primary had no answer from it), gets a new one on
#     the third server (backup_ready), and the job goes on with no failover
#     and no rollback, to a SUCCEEDED end with the accuracy of the same job
#     run first without the partition (BSP: no update lost or doubled).
#  4. After teardown no namespace (hence no veth, no bridge) of the run is
#     left, and no daemon.
# Options: --servers=S (default 1), --models=BSP,ASP (BSP),
# --cut=worker|server|backup (worker).
# Skips (in test.xml, with the reason) when not root or when network
# namespaces cannot be made. Every wait is bounded.
#
# By hand: PS_BIN_DIR=bazel-bin tests/netsim_cluster_test.sh
set -uo pipefail
export PATH=/usr/sbin:/sbin:/usr/bin:/bin:$PATH
start_s=$SECONDS
log() { echo "netsim_cluster_test: $(date -u +%H:%M:%S) $*"; }

# Bash 5.2 would expand & in a ${var//x/y} replacement to the match.
shopt -u patsub_replacement 2>/dev/null || true
TEST_XML_SUITE=netsim_cluster_test
TEST_XML_CASE=ClusterAcrossNamespaces
if [[ -n ${TEST_SRCDIR:-} ]]; then
  source "$TEST_SRCDIR/ps/tests/test_xml.sh"
else
  source "$(dirname "$0")/test_xml.sh"
fi
skip() { log "SKIPPED: $*"; write_xml skip "$*"; exit 0; }

servers=1 models=BSP cut=worker
while (($#)); do
  case $1 in
    --servers=*) servers=${1#*=}; shift ;;
    --models=*) models=${1#*=}; models=${models//,/ }; shift ;;
    --cut=*) cut=${1#*=}; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
[[ $cut =~ ^(worker|server|backup)$ ]] || { echo "--cut worker, server or backup"; exit 2; }
[[ $cut != backup ]] || ((servers >= 3)) || { echo "--cut backup needs --servers=3 or more"; exit 2; }
w0=h$((servers + 1)) w1=h$((servers + 2))  # the worker hosts

# ---- prerequisites ----------------------------------------------------------
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root; run the test as root"
for c in ip tc unshare ss; do
  command -v "$c" >/dev/null || skip "$c is not installed (iproute2, util-linux)"
done
probe="nsim-probe-$$"
if ! err=$(ip netns add "$probe" 2>&1); then
  skip "cannot make a network namespace (ip netns add: $err)"
fi
ip netns del "$probe"

if [[ -n "${TEST_SRCDIR:-}" ]]; then
  bin=$TEST_SRCDIR/${TEST_WORKSPACE:-ps}
  tmp=$TEST_TMPDIR
else
  bin=$(cd "${PS_BIN_DIR:?set PS_BIN_DIR to the bazel-bin directory}" && pwd)
  tmp=$(mktemp -d /tmp/netsim-test.XXXXXX)
  by_hand=1
fi
src=$(cd "$(dirname "$0")/.." && pwd)
[[ -x $src/tools/netsim/cluster.sh ]] || src=$bin

# ---- the cluster, torn down whatever happens ---------------------------------
export NETSIM_CLUSTER_DIR=$tmp/netsim-cluster
export NETSIM_OWNER=$$
C=$src/tools/netsim/cluster.sh
prefix=""
result=fail msg="did not finish"
finish() {
  local rc=$?
  trap '' INT TERM
  "$C" down >/dev/null 2>&1 || true
  if [[ -n $prefix ]] && ip netns list | grep -q "^$prefix-"; then
    log "FAIL: namespaces left after teardown: $(ip netns list | grep "^$prefix-" | tr '\n' ' ')"
    for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix-"); do ip netns del "$ns"; done
    result=fail msg="namespaces left after teardown"; rc=1
  fi
  if ((rc != 0)) && [[ $result == pass ]]; then result=fail msg="exit $rc"; fi
  write_xml "$result" "$msg"
  log "took $((SECONDS - start_s)) s"
  # By hand, the logs of a failed run stay in $tmp.
  if [[ -n ${by_hand:-} && $result == pass ]]; then rm -rf "$tmp"; fi
  exit "$rc"
}
trap finish EXIT
trap 'msg="signalled"; exit 143' INT TERM
fail() {
  log "FAIL: $*"
  result=fail msg="$*"
  "$C" status 2>&1 | tail -n 20
  [[ -n ${JOB:-} ]] && { "$C" psctl status "$JOB"; "$C" psctl events "$JOB"; } 2>&1 | tail -n 40
  for f in "$NETSIM_CLUSTER_DIR"/logs/*.log; do echo "=== $f"; tail -n 20 "$f"; done
  exit 1
}
psctl() { "$C" psctl "$@"; }
state_of() { psctl status "$1" 2>/dev/null | awk '$1 == "state" { sub(":", "", $2); print $2 }'; }
step_of() { psctl status "$1" 2>/dev/null | awk '$1 == "progress" { split($3, a, "/"); print a[1] }'; }
wait_end() {  # JOB SECONDS: prints the final state
  local end=$((SECONDS + $2)) s=""
  while ((SECONDS < end)); do
    s=$(state_of "$1")
    [[ $s =~ SUCCEEDED|FAILED|CANCELLED ]] && { echo "$s"; return 0; }
    sleep 0.5
  done
  echo "TIMEOUT($s)"
  return 1
}
spec() {  # NAME STEPS [MODEL]
  cat >"$tmp/$1.pbtxt" <<EOT
name: "$1"
model { mlp { input_dim: 784 hidden: 64 num_classes: 10 } }
optimizer {
  kind: MOMENTUM learning_rate: 0.05 momentum: 0.9
  schedule { kind: COSINE total_steps: $2 min_lr: 0.0005 }
}
consistency { model: ${3:-BSP} heartbeat_timeout_ms: 3000 barrier_timeout_ms: 60000 }
data { batch_size: 64 max_steps: $2 eval_every_steps: 500 }
checkpoint { every_versions: 50 }
$([[ $cut == backup ]] && echo "replication { factor: 2 }")
num_workers: 2
seed: 7
EOT
}

"$C" up --servers "$servers" --workers 2 --rate 1gbit --bin_dir "$bin" \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --coordinator_flag=--member_timeout_ms=3000 \
  --worker_flag=--heartbeat_interval_ms=200 \
  --worker_flag=--report_every_steps=10 || fail "cluster.sh up failed"
prefix=$(cat "$NETSIM_CLUSTER_DIR/net/prefix")
"$C" net status

# 1. Members at their hosts' addresses.
st=$("$C" psctl cluster status) || fail "psctl cluster status failed"
echo "$st"
grep -qE '^coordinator 198\.18\.0\.1:[0-9]+: SERVING' <<<"$st" ||
  fail "the coordinator is not at 198.18.0.1"
for ((i = 0; i < servers; i++)); do
  grep -qE "^[0-9]+ +SERVER +198\.18\.0\.$((i + 2)):[0-9]+ .* ALIVE " <<<"$st" ||
    fail "server $i is not registered at 198.18.0.$((i + 2))"
done
(($(grep -cE '^[0-9]+ +WORKER .* ALIVE ' <<<"$st") == 2)) || fail "not two workers ALIVE"
for ((i = 0; i < servers + 3; i++)); do
  "$C" net exec "h$i" ip route | grep -q default && fail "h$i has a default route"
done
server=$(grep -oE '198\.18\.0\.2:[0-9]+' <<<"$st" | head -n1)

# 2. A short job per model; the workers reach server 0 from their own
#    addresses.
for model in $models; do
  spec "netsim_$model" 300 "$model"
  JOB=$(psctl submit "$tmp/netsim_$model.pbtxt" | head -n1)
  [[ -n $JOB ]] || fail "submit failed"
  seen=""
  end=$((SECONDS + 120))
  while ((SECONDS < end)); do
    for h in $w0 $w1; do
      a=$("$C" net addr "$h")
      # ss prints IPv4-mapped addresses as [::ffff:a.b.c.d]:port.
      "$C" net exec "$h" ss -tn 2>/dev/null | sed 's/\[::ffff://g; s/\]//g' |
        grep -qE "^ESTAB .* $a:[0-9]+ +$server( |\$)" &&
        [[ $seen != *"$h "* ]] && seen+="$h "
    done
    [[ $(state_of "$JOB") =~ SUCCEEDED|FAILED|CANCELLED ]] && break
    sleep 0.2
  done
  state=$(wait_end "$JOB" 10) || true
  [[ $state == SUCCEEDED ]] || fail "$model job $JOB ended $state"
  psctl status "$JOB" | grep -E '^(state|consistency|progress|metric|throughput)'
  log "$model: worker hosts seen connected to server 0 at $server: ${seen:-none}"
  [[ $seen == *"$w0 "* && $seen == *"$w1 "* ]] ||
    fail "the workers' connections to $server from $w0 and $w1 were not seen (saw: ${seen:-none})"
done

accuracy_of() {
  psctl metrics "$1" --format csv |
    awk -F, '$2 == "test_accuracy" { v = $7 } END { print v }' || true
}
# 3. A link cut mid-job.
if [[ $cut == backup ]]; then
  spec netsim_clean 1500
  JOB=$(psctl submit "$tmp/netsim_clean.pbtxt" | head -n1)
  state=$(wait_end "$JOB" 240) || true
  [[ $state == SUCCEEDED ]] || fail "the clean job ended $state"
  clean_accuracy=$(accuracy_of "$JOB")
  log "clean run: test accuracy $clean_accuracy"
fi
spec netsim_cut $([[ $cut == backup ]] && echo 1500 || echo 2000)
JOB=$(psctl submit "$tmp/netsim_cut.pbtxt" | head -n1)
end=$((SECONDS + 90))
until s=$(step_of "$JOB"); [[ -n $s ]] && ((s >= 200)); do
  ((SECONDS < end)) || fail "the job did not reach step 200"
  sleep 0.2
done
if [[ $cut == worker ]]; then
  # The worker is evicted, the job SUCCEEDS; restored, the worker registers
  # again.
  s0=$(step_of "$JOB")
  "$C" net cut "$w1"
  t_cut=$SECONDS
  log "cut worker host $w1 at step $s0"
  end=$((SECONDS + 60))
  until psctl events "$JOB" 2>/dev/null | grep -q evicted; do
    ((SECONDS < end)) || fail "the cut worker was not evicted within 60 s"
    sleep 0.5
  done
  log "evicted after $((SECONDS - t_cut)) s"
  psctl events "$JOB" | grep -E 'evicted|data_moved'
  state=$(wait_end "$JOB" 180) || true
  [[ $state == SUCCEEDED ]] || fail "job with a cut worker ended $state"
  psctl status "$JOB" | grep -E '^(state|progress|metric)'
  "$C" net restore "$w1"
  end=$((SECONDS + 60))
  until (($(psctl cluster status 2>/dev/null | grep -cE '^[0-9]+ +WORKER .* ALIVE ') == 2)); do
    ((SECONDS < end)) || fail "the restored worker did not come back within 60 s"
    sleep 0.5
  done
  log "restored: both workers ALIVE $((SECONDS - t_cut)) s after the cut"
elif [[ $cut == backup ]]; then
  s0=$(step_of "$JOB")
  "$C" net partition h1 h2
  t_cut=$SECONDS
  log "partitioned h1 from h2 (servers 0 and 1) at step $s0"
  end=$((SECONDS + 60))
  until psctl events "$JOB" 2>/dev/null | grep -q 'backup_ready.*2 replicas'; do
    ((SECONDS < end)) || fail "no new backup in sync within 60 s of the partition"
    sleep 0.5
  done
  log "new backup in sync $((SECONDS - t_cut)) s after the partition"
  ev=$(psctl events "$JOB")
  grep -E 'backup_|failover|rollback' <<<"$ev"
  grep -qE 'backup_lost .*no answer from it' <<<"$ev" ||
    fail "no backup_lost event saying its primary had no answer"
  grep -qE 'failover|rollback|evicted' <<<"$ev" &&
    fail "a failover, rollback or eviction: the coordinator reaches every server"
  state=$(wait_end "$JOB" 180) || true
  [[ $state == SUCCEEDED ]] || fail "the partitioned job ended $state"
  psctl status "$JOB" | grep -E '^(state|progress|metric|replicas)'
  psctl status "$JOB" | grep -qE '^replicas +factor 2, backups per shard: 1, 1, 1$' ||
    fail "not every shard has a backup at the end"
  accuracy=$(accuracy_of "$JOB")
  log "partitioned run: test accuracy $accuracy (clean: $clean_accuracy)"
  [[ -n $accuracy && $accuracy == "$clean_accuracy" ]] ||
    fail "test accuracy $accuracy, not the clean run's $clean_accuracy"
  "$C" net heal h1 h2
else
  # server_failure; the workers stall; restored: server_recovered, SUCCEEDED.
  s0=$(step_of "$JOB")
  "$C" net cut h1
  t_cut=$SECONDS
  log "cut server host h1 at step $s0"
  end=$((SECONDS + 60))
  until psctl events "$JOB" 2>/dev/null | grep -q server_failure; do
    ((SECONDS < end)) || fail "no server_failure within 60 s of the cut"
    sleep 0.5
  done
  log "server_failure after $((SECONDS - t_cut)) s"
  s1=$(step_of "$JOB"); sleep 2; s2=$(step_of "$JOB")
  log "steps while cut: $s1 then $s2"
  "$C" net restore h1
  end=$((SECONDS + 60))
  until psctl events "$JOB" 2>/dev/null | grep -qE 'server_recovered|server_restored'; do
    ((SECONDS < end)) || fail "the shard was not seen back within 60 s of the restore"
    sleep 0.5
  done
  psctl events "$JOB" | grep -E 'server_|rollback'
  state=$(wait_end "$JOB" 180) || true
  [[ $state == SUCCEEDED ]] || fail "job with a cut server ended $state"
  psctl status "$JOB" | grep -E '^(state|progress|metric)'
fi

# 4. Teardown leaves nothing.
pids=$(cat "$NETSIM_CLUSTER_DIR"/pids/*.pid)
"$C" down || fail "cluster.sh down failed"
left=$(ip netns list | grep "^$prefix-" || true)
[[ -z $left ]] || fail "namespaces left: $left"
for p in $pids; do
  kill -0 "$p" 2>/dev/null && fail "daemon $p still runs"
done
[[ -d $NETSIM_CLUSTER_DIR/net ]] && fail "the simulator's state was not removed"
log "PASS"
result=pass msg=""
