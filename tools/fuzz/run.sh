#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (Bazel's toolchain is gcc) and runs
# each for a bounded time from its committed seed corpus.
#   tools/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
# Targets: idx_reader config payload_codec criteo_reader libsvm_reader
# movielens_reader (default: all). Needs the packages
# clang and libclang-rt-14-dev (tools/setup.sh) and the system protobuf, gRPC,
# Abseil and zlib. Exit status: 0 if no target crashed, 1 if one did (the
# crashing input is kept under $FUZZ_OUT, default a temporary directory, and
# its path printed), 2 if a target could not be built.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
secs=${1:-20}
shift || true
targets=("$@")
((${#targets[@]})) ||
  targets=(idx_reader config payload_codec criteo_reader libsvm_reader
           movielens_reader)

CXX=${CXX_FUZZ:-clang++}
command -v "$CXX" >/dev/null ||
  { echo "fuzz: $CXX not found (apt-get install clang libclang-rt-14-dev)"; exit 2; }

work=$(mktemp -d /tmp/ps-fuzz.XXXXXX)
out=${FUZZ_OUT:-$work/out}
mkdir -p "$out"
keep=0
cleanup() { ((keep)) || rm -rf "$work"; }
trap cleanup EXIT

# Generated protobuf code from the system protoc (the same one Bazel uses).
gen=$work/gen
mkdir -p "$gen"
protoc --proto_path="$ROOT" --cpp_out="$gen" proto/config.proto \
  proto/parameter_service.proto ||
  { echo "fuzz: protoc failed"; exit 2; }

# Our code and the generated code get coverage and ASan+UBSan; the system
# libraries are linked as they are.
# shellcheck disable=SC2054  # the commas are part of -fsanitize=...
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$ROOT" -I"$gen" -Wno-deprecated-declarations)
libs=$(pkg-config --libs grpc++ protobuf absl_status absl_statusor absl_strings \
  absl_str_format absl_synchronization 2>/dev/null) ||
  { echo "fuzz: pkg-config cannot find grpc++/protobuf/absl"; exit 2; }

# The streaming text readers (worker/data/), shared by the three formats.
text_reader="worker/data/batch.cc worker/data/batch_reader.cc worker/data/bad_lines.cc worker/data/line_reader.cc worker/data/text_reader.cc"
declare -A srcs=(
  [idx_reader]="worker/idx_reader.cc"
  [criteo_reader]="$text_reader worker/data/criteo_format.cc"
  [libsvm_reader]="$text_reader worker/data/libsvm_format.cc"
  [movielens_reader]="$text_reader worker/data/movielens_format.cc"
  [config]="common/config.cc common/job_metric.cc common/config_sparse.cc common/config_violations.cc common/model.cc common/model_graph.cc common/model_graph_rules.cc common/file_system.cc common/status.cc $gen/proto/config.pb.cc"
  [payload_codec]="common/payload_codec.cc common/sparse_rows.cc common/status.cc $gen/proto/config.pb.cc $gen/proto/parameter_service.pb.cc"
)
declare -A extra=([idx_reader]="-lz" [config]="" [payload_codec]=""
                  [criteo_reader]="-lz" [libsvm_reader]="-lz"
                  [movielens_reader]="-lz")

rc=0
for t in "${targets[@]}"; do
  [[ -n ${srcs[$t]:-} ]] || { echo "fuzz: unknown target $t"; exit 2; }
  bin=$work/${t}_fuzzer
  echo "fuzz: building $t"
  # shellcheck disable=SC2086
  if ! "$CXX" "${flags[@]}" "tools/fuzz/${t}_fuzzer.cc" ${srcs[$t]} -o "$bin" \
      $libs ${extra[$t]} 2>"$work/$t.build.log"; then
    cat "$work/$t.build.log"; echo "fuzz: $t did not build"; exit 2
  fi
  # libFuzzer adds new inputs to the first corpus directory: work on a copy
  # so the committed seeds stay as they are.
  corpus=$work/corpus-$t
  mkdir -p "$corpus"
  cp tools/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: running $t for ${secs}s"
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$out/$t-" \
    "$corpus" >"$work/$t.log" 2>&1
  trc=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)' "$work/$t.log" |
    sed "s/^/fuzz: $t: /"
  if ((trc != 0)); then
    tail -n 60 "$work/$t.log"
    echo "fuzz: $t FAILED (exit $trc); inputs under $out:"; ls -l "$out"
    rc=1; keep=1
  else
    echo "fuzz: $t ok"
  fi
done
exit $rc
