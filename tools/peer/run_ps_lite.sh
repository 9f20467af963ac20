#!/usr/bin/env bash
# Runs the ps-lite dense push/pull driver on this machine: 1 scheduler,
# SERVERS server processes and WORKERS worker processes. Each worker prints
# one line ("worker RANK bytes B steps N seconds S gbps G steps_per_s R
# cpu_user U cpu_sys Y"); their GB/s add up to the aggregate.
#
# usage: run_ps_lite.sh BINARY SERVERS WORKERS MODEL_BYTES SECONDS [PORT]
set -uo pipefail
BIN=$1 S=$2 W=$3 B=$4 T=$5 PORT=${6:-$((9000 + RANDOM % 2000))}
export DMLC_NUM_SERVER=$S DMLC_NUM_WORKER=$W DMLC_PS_ROOT_URI=127.0.0.1
export DMLC_PS_ROOT_PORT=$PORT BENCH_BYTES=$B BENCH_SECONDS=$T PS_VERBOSE=0
pids=()
DMLC_ROLE=scheduler "$BIN" & pids+=($!)
for ((i = 0; i < S; i++)); do DMLC_ROLE=server "$BIN" & pids+=($!); done
for ((i = 0; i < W; i++)); do DMLC_ROLE=worker "$BIN" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
