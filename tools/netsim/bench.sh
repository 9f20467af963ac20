#!/usr/bin/env bash
# BSP against ASP across simulated hosts at several link rates: for each
# rate, a cluster (tools/netsim/cluster.sh: coordinator, 1 server, 2 CPU
# workers, each on its own host) runs the same Fashion-MNIST MLP job under
# BSP, then under ASP (--models), once per gradient compression
# (--compressions), and one line per job is printed: rate, model,
# compression, steps, wall seconds (submit to end), examples/s and test
# accuracy as psctl status reports them, the time to --target, and the
# bytes the server host's link carried in and out during the job (its eth0
# counters) as MB/s over the wall time.
#
#   tools/netsim/bench.sh [--rates "none 10gbit 1gbit"] [--hidden 1024]
#                         [--steps 300] [--bin_dir DIR] [--models "BSP ASP"]
#                         [--compressions "none topk:0.1"]
#                         [--target 0.8 --eval_every 50] [--net mlp|cnn|fm]
#                         [--ctr_dir /tmp/ctr] [--delays "none 0 500"]
#                         [--plots DIR]
#
# --delays: each rate runs once per entry: "none" (workers talk directly)
# or microseconds of added latency in each direction between a worker and
# the others (cluster.sh up --delay_us: a delay proxy on the worker's host;
# 0 is the proxy's own cost). --plots: `psctl compare` of each cluster's
# jobs (one per rate and delay, with --target) as DIR/<net>-<rate>-<delay>
# .png/.svg and its table in .txt.
#
# --models: BSP, ASP, SSP3 (SSP with staleness 3), BSP+backup (BSP with
# one backup worker: each step closes with the first worker's gradient).
# --net cnn: the CNN of configs/fashion_mnist_cnn_bsp.pbtxt (two 5x5
# convolutions, 256 units, 3.4 MB of parameters; Adam 0.0015 with cosine
# decay over --steps) instead of the MLP 784-<hidden>-10. --net fm: the
# CTR FM of configs/ctr_fm_bsp.pbtxt (its model and optimizer) on the click
# log in --ctr_dir (train.txt, test.txt: tools/data/criteo_gen), batches
# of 256, judged by test AUC instead of accuracy.
#
# --compressions: each job runs once per entry: "none" (dense fp32), "fp16"
# or "bf16" (compression { wire_dtype: ... }: both directions narrowed),
# "topk:R" (compression { kind: TOPK ratio: R }, docs/performance/
# wire-formats.md), or "topk:R:fp16" / "topk:R:bf16" (both).
# --target: the jobs evaluate every --eval_every steps on 2000 test images,
# and t@target is the worker's job time (metric time_ms) of the first
# evaluation at or above the target ("never": not reached; "-": no
# --target).
#
# "none" is an unshaped link. The MLP's parameters cross the server's link
# twice per worker per step (push and pull), 4 bytes each in fp32: with
# hidden 1024 about 3.3 MB each way. Needs root; every wait is bounded.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rates="none 10gbit 1gbit" hidden=1024 steps=300 bin_dir="" models="BSP ASP"
compressions=none target="" eval_every=50 net=mlp ctr_dir=/tmp/ctr
delays=none plots=""
while (($#)); do
  case $1 in
    --rates) rates=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --bin_dir) bin_dir=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --compressions) compressions=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --eval_every) eval_every=$2; shift 2 ;;
    --net) net=$2; shift 2 ;;
    --ctr_dir) ctr_dir=$2; shift 2 ;;
    --delays) delays=$2; shift 2 ;;
    --plots) plots=$2; shift 2 ;;
    *) echo "usage: $0 [--rates R] [--hidden H] [--steps N] [--bin_dir DIR]" \
         "[--models M] [--compressions C] [--target A] [--eval_every N]" \
         "[--net mlp|cnn|fm] [--ctr_dir D] [--delays D] [--plots DIR]" >&2
       exit 2 ;;
  esac
done
[[ $net =~ ^(mlp|cnn|fm)$ ]] || { echo "bench: --net is mlp, cnn or fm, not $net" >&2; exit 2; }
metric=test_accuracy batch=64 data=""
if [[ $net == fm ]]; then
  [[ -s $ctr_dir/train.txt && -s $ctr_dir/test.txt ]] ||
    { echo "bench: no click log in $ctr_dir (tools/data/criteo_gen --out_dir=$ctr_dir --max_vocab=100)" >&2; exit 2; }
  metric=test_auc batch=256
  data="format: CRITEO train_files: \"$ctr_dir/train.txt\" test_files: \"$ctr_dir/test.txt\" shuffle_buffer: 10000"
fi
for m in $models; do
  [[ $m =~ ^(BSP|ASP|SSP3|BSP\+backup)$ ]] ||
    { echo "bench: --models entries are BSP, ASP, SSP3 or BSP+backup, not $m" >&2; exit 2; }
done
for c in $compressions; do
  [[ $c =~ ^(none|fp16|bf16|topk:(0?\.[0-9]+|1)(:fp16|:bf16)?)$ ]] ||
    { echo "bench: --compressions entries are none, fp16, bf16 or topk:R[:fp16|:bf16], not $c" >&2; exit 2; }
done
for d in $delays; do
  [[ $d =~ ^(none|[0-9]+)$ ]] ||
    { echo "bench: --delays entries are none or microseconds, not $d" >&2; exit 2; }
done
[[ -z $plots ]] || mkdir -p "$plots"
own_dir=""
[[ -n ${NETSIM_CLUSTER_DIR:-} ]] || own_dir=/tmp/netsim-bench.$$
export NETSIM_CLUSTER_DIR=${NETSIM_CLUSTER_DIR:-$own_dir}
export NETSIM_OWNER=$$
C=$here/cluster.sh
trap '"$C" down >/dev/null 2>&1 || true; [[ -z $own_dir ]] || rm -rf "$own_dir"' EXIT
trap 'exit 143' INT TERM

spec() {  # MODEL COMPRESSION -> file
  local f=$NETSIM_CLUSTER_DIR/bench-$1-${2//:/}.pbtxt compression="" eval=100000
  local examples=0 dtype="" topk="" consistency="model: $1"
  local name=netsim-$1
  [[ $2 == none ]] || name+=-$2
  [[ $1 == SSP3 ]] && consistency="model: SSP staleness: 3"
  [[ $1 == BSP+backup ]] && consistency="model: BSP backup_workers: 1"
  case $2 in
    *fp16) dtype="wire_dtype: FLOAT16" ;;
    *bf16) dtype="wire_dtype: BFLOAT16" ;;
  esac
  [[ $2 == topk:* ]] && topk=${2#topk:} && topk="kind: TOPK ratio: ${topk%%:*}"
  [[ -z $dtype$topk ]] || compression="compression { $topk $dtype }"
  [[ -z $target ]] || { eval=$eval_every; examples=2000; }
  local model="model { mlp { input_dim: 784 hidden: $hidden num_classes: 10 } }"
  local optimizer="kind: MOMENTUM learning_rate: 0.05 momentum: 0.9
  schedule { kind: COSINE total_steps: $steps min_lr: 0.0005 }"
  if [[ $net == cnn ]]; then
    model='model {
  inputs { name: "image" shape: [28, 28, 1] }
  layers { name: "conv1" inputs: "image" conv2d { filters: 32 kernel_size: 5 padding: 2 activation: RELU } }
  layers { name: "pool1" inputs: "conv1" max_pool2d { window: 2 } }
  layers { name: "conv2" inputs: "pool1" conv2d { filters: 64 kernel_size: 5 padding: 2 activation: RELU } }
  layers { name: "pool2" inputs: "conv2" max_pool2d { window: 2 } }
  layers { name: "flat" inputs: "pool2" flatten {} }
  layers { name: "fc1" inputs: "flat" dense { units: 256 activation: RELU } }
  layers { name: "logits" inputs: "fc1" dense { units: 10 } }
  head { loss: SOFTMAX_CROSS_ENTROPY }
}'
    optimizer="kind: ADAM learning_rate: 0.0015
  schedule { kind: COSINE total_steps: $steps min_lr: 0.00001 }"
  elif [[ $net == fm ]]; then
    # The config's model block (from "model {" to its closing brace).
    model=$(awk '/^model \{/ { on = 1 } on { print } on && /^\}/ { exit }' \
      "$here/../../configs/ctr_fm_bsp.pbtxt")
    optimizer=$(awk '/^optimizer \{/ { sub(/^optimizer \{ */, ""); sub(/ *\}$/, ""); print }' \
      "$here/../../configs/ctr_fm_bsp.pbtxt")
  fi
  cat >"$f" <<EOT
name: "$name"
$model
optimizer {
  $optimizer
}
consistency { $consistency heartbeat_timeout_ms: 10000 barrier_timeout_ms: 120000 }
data { $data batch_size: $batch max_steps: $steps eval_every_steps: $eval eval_examples: $examples }
num_workers: 2
seed: 7
$compression
EOT
  echo "$f"
}

srv_bytes() {  # rx+tx bytes of the server host's eth0
  "$C" net exec h1 sh -c 'echo $(( $(cat /sys/class/net/eth0/statistics/rx_bytes) + $(cat /sys/class/net/eth0/statistics/tx_bytes) ))'
}
fmt='%-7s %-8s %-10s %-14s %6s %8s %10s %8s %9s %12s\n'
# shellcheck disable=SC2059
printf "$fmt" rate delay_us model gradients steps wall_s examples/s accuracy t@target server_MB/s
for rate in $rates; do
  for delay in $delays; do
  up_flags=()
  [[ $rate == none ]] || up_flags=(--rate "$rate")
  [[ $delay == none ]] || up_flags+=(--delay_us "$delay")
  "$C" up --servers 1 --workers 2 "${up_flags[@]}" ${bin_dir:+--bin_dir "$bin_dir"} 2>/dev/null
  job_ids=()
  for model in $models; do
  for compression in $compressions; do
    f=$(spec "$model" "$compression")
    b0=$(srv_bytes)
    t0=$(date +%s.%N)
    job=$("$C" psctl submit "$f" | head -n1)
    job_ids+=("$job")
    state=""
    for ((i = 0; i < 1200; i++)); do
      state=$("$C" psctl status "$job" | awk '$1 == "state" { sub(":", "", $2); print $2 }')
      [[ $state =~ SUCCEEDED|FAILED|CANCELLED ]] && break
      sleep 0.25
    done
    t1=$(date +%s.%N)
    b1=$(srv_bytes)
    st=$("$C" psctl status "$job")
    thr=$(awk '$1 == "throughput" { print $2 }' <<<"$st")
    acc=$(awk '$1 == "metric" { print $4 }' <<<"$st")
    [[ $state == SUCCEEDED ]] || acc="$state"
    read -r wall mbs < <(awk -v a="$t0" -v b="$t1" -v x="$b0" -v y="$b1" \
      'BEGIN { printf "%.1f %.0f\n", b - a, (y - x) / 1e6 / (b - a) }')
    tt="-"
    if [[ -n $target ]]; then
      # The first evaluation at or above the target, by its job time.
      tt=$("$C" psctl metrics "$job" --format csv 2>/dev/null | awk -F, -v t="$target" -v m="$metric" '
        $2 == m && $7 >= t && (best == "" || $5 < best) { best = $5 }
        END { if (best == "") print "never"; else printf "%.1f\n", best / 1000 }')
    fi
    # shellcheck disable=SC2059
    printf "$fmt" "$rate" "$delay" "$model" "${compression/none/dense}" "$steps" "$wall" \
      "$thr" "$acc" "$tt" "$mbs"
  done
  done
  if [[ -n $plots && -n $target ]]; then
    out=$plots/$net-$rate-$delay
    "$C" psctl compare "${job_ids[@]}" --target "$target" --out "$out" >"$out.txt" 2>&1 ||
      echo "bench: psctl compare failed: see $out.txt" >&2
  fi
  "$C" down >/dev/null 2>&1
  done
done
