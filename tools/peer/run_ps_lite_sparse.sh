#!/usr/bin/env bash
# Runs the ps-lite sparse push/pull driver on this machine: 1 scheduler,
# SERVERS server processes and WORKERS worker processes, rows of DIM floats,
# batches of 4096 unique keys Zipf(1.05) from 10^7 (BENCH_BATCH,
# BENCH_KEY_SPACE, BENCH_ZIPF_S override them). Each worker prints one line
# ("worker RANK dim D steps N seconds S rows_per_s R gbps G"); their rows/s
# and GB/s add up to the aggregate.
#
# usage: run_ps_lite_sparse.sh BINARY SERVERS WORKERS DIM SECONDS [PORT]
set -uo pipefail
BIN=$1 S=$2 W=$3 D=$4 T=$5 PORT=${6:-$((9000 + RANDOM % 2000))}
export DMLC_NUM_SERVER=$S DMLC_NUM_WORKER=$W DMLC_PS_ROOT_URI=127.0.0.1
export DMLC_PS_ROOT_PORT=$PORT BENCH_DIM=$D BENCH_SECONDS=$T PS_VERBOSE=0
pids=()
DMLC_ROLE=scheduler "$BIN" & pids+=($!)
for ((i = 0; i < S; i++)); do DMLC_ROLE=server "$BIN" & pids+=($!); done
for ((i = 0; i < W; i++)); do DMLC_ROLE=worker "$BIN" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
