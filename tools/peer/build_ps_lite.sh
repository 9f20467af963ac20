#!/usr/bin/env bash
# Builds ps-lite (github.com/dmlc/ps-lite, unpatched) and the dense and
# sparse push/pull drivers next to this script, outside this repository's
# build, against Debian's libzmq3-dev and the system protobuf, with ps-lite's
# own Makefile flags. For the comparisons in docs/performance/
# (ps-bench.md, sparse-tables.md). The sparse driver also compiles this
# repository's Zipf sampler (tools/data/zipf.cc, C++17, the system Abseil),
# to draw the key stream ps_bench draws.
#
# usage: build_ps_lite.sh PS_LITE_CHECKOUT OUT_DIR
# Writes OUT_DIR/ps_lite_dense_bench and OUT_DIR/ps_lite_sparse_bench; run
# them with run_ps_lite.sh and run_ps_lite_sparse.sh.
set -euo pipefail
SRC=$(cd "$1" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
FLAGS="-std=c++14 -msse2 -O3 -Wall -finline-functions -DNDEBUG -pthread"
mkdir -p "$OUT/gen"
protoc --cpp_out="$OUT/gen" -I"$SRC/src" "$SRC/src/meta.proto"
INC="-I$OUT/gen -I$SRC/src -I$SRC/include"
objs=()
for f in "$SRC"/src/{customer,postoffice,van}.cc "$OUT/gen/meta.pb.cc"; do
  o="$OUT/$(basename "$f" .cc).o"
  g++ $FLAGS $INC -c "$f" -o "$o"
  objs+=("$o")
done
g++ $FLAGS $INC "$HERE/ps_lite_dense_bench.cc" "${objs[@]}" \
  -lzmq -lprotobuf -o "$OUT/ps_lite_dense_bench"
REPO=$(cd "$HERE/../.." && pwd)
g++ ${FLAGS/c++14/c++17} $INC -I"$REPO" "$HERE/ps_lite_sparse_bench.cc" \
  "$REPO/tools/data/zipf.cc" "${objs[@]}" -lzmq -lprotobuf \
  -labsl_statusor -labsl_status -labsl_strings -labsl_str_format_internal \
  -labsl_int128 -labsl_raw_logging_internal -labsl_hash -labsl_city \
  -labsl_low_level_hash -labsl_raw_hash_set -o "$OUT/ps_lite_sparse_bench"
echo "$OUT/ps_lite_dense_bench"
echo "$OUT/ps_lite_sparse_bench"
