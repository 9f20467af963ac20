#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (Bazel's toolchain is gcc) and runs
# each for a bounded time from its committed seed corpus.
#   tools/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
# Targets: idx_reader config payload_codec criteo_reader libsvm_reader
# movielens_reader (default: all); each is //tools/fuzz:NAME_fuzzer in
# tools/fuzz/BUILD.bazel, whose deps say what gets compiled. Needs bazel, the
# packages clang and libclang-rt-14-dev (tools/setup.sh) and the system
# protobuf, gRPC, Abseil and zlib. Exit status: 0 if no target crashed, 1 if one did (the
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

command -v bazel >/dev/null || { echo "fuzz: bazel not found"; exit 2; }
# What each target compiles is what Bazel says //tools/fuzz:NAME_fuzzer uses
# (tools/fuzz/BUILD.bazel): our .cc files from `bazel query`, the generated
# .pb.cc files built by Bazel, and the linkopts and defines of the
# cc_library targets below it (the system libraries' -l flags). No list here
# to keep up to date.
query() {
  bazel query --noshow_progress "$@" 2>>"$work/query.log" ||
    { cat "$work/query.log"; echo "fuzz: bazel query failed"; exit 2; }
}
# //pkg:file.cc -> pkg/file.cc (//:file.cc -> file.cc)
label_path() { sed -e 's|^//||' -e 's|^:||' -e 's|:|/|'; }
# The values of one list attribute in `bazel query --output=build`.
build_attr() { sed -n "s/^  $1 = \[\(.*\)\],\?\$/\1/p" | tr ',' '\n' |
  sed -e 's/^ *"//' -e 's/"$//' | grep -v '^$'; }

declare -A srcs gens links defs
for t in "${targets[@]}"; do
  [[ -f tools/fuzz/${t}_fuzzer.cc ]] || { echo "fuzz: unknown target $t"; exit 2; }
  label=//tools/fuzz:${t}_fuzzer
  srcs[$t]=$(query "kind('source file', deps($label))" | grep -E '^//.*\.cc$' |
    label_path | sort)
  gens[$t]=$(query "kind('generated file', deps($label))" |
    grep -E '^//.*\.cc$' | sort)
  rules=$(query --output=build "kind(cc_library, deps($label))")
  links[$t]=$(build_attr linkopts <<<"$rules" | awk '!seen[$0]++')
  defs[$t]=$(build_attr defines <<<"$rules" | sort -u | sed 's/^/-D/')
done
# The generated code (protoc through tools/bazel/proto.bzl), from Bazel.
mapfile -t gen_labels < <(printf '%s\n' "${gens[@]}" | grep . | sort -u)
bin=$(bazel info bazel-bin 2>/dev/null) || { echo "fuzz: bazel info failed"; exit 2; }
if ((${#gen_labels[@]})); then
  bazel build --noshow_progress "${gen_labels[@]}" >"$work/gen.log" 2>&1 ||
    { cat "$work/gen.log"; echo "fuzz: generating code failed"; exit 2; }
fi

# Our code and the generated code get coverage and ASan+UBSan; the system
# libraries are linked as they are.
# shellcheck disable=SC2054  # the commas are part of -fsanitize=...
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$ROOT" -I"$bin" -Wno-deprecated-declarations)

# Each file is compiled once (targets share the readers and the generated
# code), on as many cores as there are.
objs=$work/obj
jobs=$(nproc 2>/dev/null || echo 2)
compile() {  # compile TARGET FILE... -> the objects' paths on stdout
  local t=$1 f o running=0
  shift
  for f in "$@"; do
    o=$objs/${f#"$bin"/}.o
    echo "$o"
    [[ -f $o ]] && continue
    mkdir -p "$(dirname "$o")"
    # shellcheck disable=SC2086
    "$CXX" "${flags[@]}" ${defs[$t]} -c "$f" -o "$o" \
      >>"$work/$t.build.log" 2>&1 || { rm -f "$o"; echo FAILED; } &
    ((++running >= jobs)) && { wait -n; ((running--)); }
  done
  wait
}

# The generated .cc files whose header the target's sources include
# (directly or not): ps_proto bundles every .proto and its gRPC code, and
# compiling all of it would double the build time. A translation unit that
# needs a symbol of X.pb.cc includes X.pb.h, so nothing needed is left out.
used_generated() {  # used_generated TARGET -> paths of generated .cc files
  local t=$1 g h headers
  # shellcheck disable=SC2086
  headers=$("$CXX" -std=c++20 -I"$ROOT" -I"$bin" ${defs[$t]} -MM ${srcs[$t]} \
    2>>"$work/$t.build.log" | tr -s ' ' '\n' | { grep -F "$bin/" || true; } |
    sort -u) ||
    return 1
  while read -r g; do
    h=${g%.cc}.h
    [[ -n $g ]] && grep -qxF "$h" <<<"$headers" && echo "$g"
  done < <(sed "s|^//|$bin/|; s|:|/|" <<<"${gens[$t]}")
  return 0
}

rc=0
for t in "${targets[@]}"; do
  bin_t=$work/${t}_fuzzer
  echo "fuzz: building $t"
  gen_files=$(used_generated "$t") ||
    { cat "$work/$t.build.log"; echo "fuzz: $t did not build"; exit 2; }
  # shellcheck disable=SC2086
  mapfile -t o < <(compile "$t" ${srcs[$t]} $gen_files)
  # shellcheck disable=SC2086
  if [[ " ${o[*]} " == *" FAILED "* ]] ||
     ! "$CXX" "${flags[@]}" "${o[@]}" -o "$bin_t" ${links[$t]} \
       >>"$work/$t.build.log" 2>&1; then
    cat "$work/$t.build.log"; echo "fuzz: $t did not build"; exit 2
  fi
  # libFuzzer adds new inputs to the first corpus directory: work on a copy
  # so the committed seeds stay as they are.
  corpus=$work/corpus-$t
  mkdir -p "$corpus"
  cp tools/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: running $t for ${secs}s"
  "$bin_t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
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
