#!/usr/bin/env bash
# A/B of two builds' training loop, alternated round by round on one
# machine: train_bench (the Fashion-MNIST MLP through one in-process shard,
# batch 128 and 512, BSP and ASP: examples/s with the PS over the same
# loop's compute-only figure) and the FM job's mean step_time_ms after step
# 500 (configs/ctr_fm_*.pbtxt, 2 ps_server processes, 2 workers, 3,000
# steps of 256 per worker on a generated click log; ASP, BSP, ASP +
# overlap_communication). Prints one line per run and the medians (range).
#
# Usage: tools/ab_loop.sh A_BIN B_BIN ROUNDS OUT_DIR
#   A_BIN, B_BIN: folders holding train_bench, psctl, coordinator,
#   ps_server, ps_worker and criteo_gen of each build, e.g.
#     bazel build //tools:train_bench //tools/psctl //server:ps_server \
#       //server/coordinator:coordinator //worker:ps_worker \
#       //tools/data:criteo_gen
#     mkdir -p /tmp/B && cp bazel-bin/tools/train_bench \
#       bazel-bin/tools/psctl/psctl bazel-bin/server/ps_server \
#       bazel-bin/server/coordinator/coordinator bazel-bin/worker/ps_worker \
#       bazel-bin/tools/data/criteo_gen /tmp/B/
set -euo pipefail
if [[ $# -ne 4 ]]; then
  sed -n '2,/^set/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
fi
A=$(realpath "$1") B=$(realpath "$2") ROUNDS=$3 OUT=$4
for bin in "$A" "$B"; do
  for b in train_bench psctl coordinator ps_server ps_worker criteo_gen; do
    [[ -x $bin/$b ]] || { echo "missing $bin/$b" >&2; exit 1; }
  done
done
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT/ctr"
if [[ ! -f $OUT/ctr/train.txt ]]; then
  "$A/criteo_gen" --out_dir="$OUT/ctr" --train_lines=400000 \
    --test_lines=1000 --max_vocab=100 >/dev/null
fi
# The FM configs with this data, 3,000 steps, no evaluation.
for c in asp bsp; do
  sed -e "s|/tmp/ctr/train.txt|$OUT/ctr/train.txt|" \
      -e '/test_files:/d' -e '/eval_every_steps:/d' -e '/eval_examples:/d' \
      -e 's|epochs: 2|epochs: 1 max_steps: 3000|' -e '/^target/d' \
      "$HERE/configs/ctr_fm_$c.pbtxt" >"$OUT/fm_$c.pbtxt"
done
sed -e 's|consistency { model: ASP }|consistency { model: ASP overlap_communication: true }|' \
  -e 's|name: "ctr-fm-asp"|name: "ctr-fm-asp-overlap"|' \
  "$OUT/fm_asp.pbtxt" >"$OUT/fm_overlap.pbtxt"
grep -q overlap_communication "$OUT/fm_overlap.pbtxt"

results="$OUT/results.csv"
echo "round,build,case,value" >"$results"
fm_step() {  # BIN CONFIG: the workers' mean step_time_ms after step 500
  local bin=$1 config=$2 run="$OUT/run"
  rm -rf "$run"
  "$bin/psctl" --run_dir "$run" cluster up --servers 2 --workers 2 \
    --bin_dir "$bin" >/dev/null
  "$bin/psctl" --run_dir "$run" submit "$config" --wait >/dev/null
  "$bin/psctl" --run_dir "$run" metrics job-1 |
    awk -F, '$2=="step_time_ms" && $3>500 {s+=$7; n++} END {printf "%.3f", s/n}'
  "$bin/psctl" --run_dir "$run" cluster down >/dev/null
}
for ((r = 1; r <= ROUNDS; r++)); do
  # A first in odd rounds, B first in even ones.
  order=(A B)
  ((r % 2 == 0)) && order=(B A)
  for name in "${order[@]}"; do
    bin=$A
    [[ $name == B ]] && bin=$B
    # train_bench's per-repeat lines: batch mode repeat compute-only ex/s,
    # with-PS ex/s, ratio.
    "$bin/train_bench" --steps=400 --repeats=1 --consistency=BSP,ASP \
      2>/dev/null | awk -v r="$r" -v n="$name" '
        NF == 6 && $1 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ {
          print r "," n ",train_bench " $1 " compute-only ex/s," $4
          print r "," n ",train_bench " $1 " " $2 " ex/s," $5
          print r "," n ",train_bench " $1 " " $2 " ratio," $6
        }' >>"$results"
    for c in asp bsp overlap; do
      v=$(fm_step "$bin" "$OUT/fm_$c.pbtxt")
      echo "$r,$name,fm $c step ms,$v" >>"$results"
    done
    echo "round $r $name done" >&2
  done
done
/usr/bin/python3 - "$results" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cases = sorted({r["case"] for r in rows})
print(f"{'case':32} {'A median (range)':24} {'B median (range)':24} B/A")
for c in cases:
    v = {b: [float(r["value"]) for r in rows if r["case"] == c and r["build"] == b]
         for b in "AB"}
    if not v["A"] or not v["B"]:
        continue
    m = {b: statistics.median(v[b]) for b in "AB"}
    f = lambda b: f"{m[b]:.3f} ({min(v[b]):.3f}-{max(v[b]):.3f})"
    print(f"{c:32} {f('A'):24} {f('B'):24} {m['B'] / m['A']:.3f}")
PY
