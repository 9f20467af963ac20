#!/usr/bin/env bash
# psctl end to end against a real local cluster: every command, and the exit
# codes scripts rely on (0 ok, 1 job failed/cancelled, 2 usage, 3 coordinator
# unreachable, 4 no such job, 5 invalid input).
set -uo pipefail
R="${TEST_SRCDIR}/ps"
RUN="${TEST_TMPDIR}/cluster"
T="$TEST_TMPDIR"
psctl() { "$R/tools/psctl/psctl" --run_dir "$RUN" --timeout 20 "$@"; }
fails=0
expect() {  # expect CODE DESCRIPTION -- command...
  local want=$1 what=$2; shift 3
  "$@" >"$T/out" 2>"$T/err"; local got=$?
  if [[ $got != "$want" ]]; then
    echo "FAIL: $what: exit $got, want $want"; cat "$T/out" "$T/err"; fails=$((fails + 1))
  else
    echo "ok: $what (exit $got)"
  fi
}
has() {  # has PATTERN FILE DESCRIPTION
  grep -q -- "$1" "$2" || { echo "FAIL: $3: no '$1' in:"; cat "$2"; fails=$((fails + 1)); }
}
trap 'psctl cluster down >/dev/null 2>&1 || true' EXIT

expect 3 "list with no cluster" -- psctl list
has "no local cluster" "$T/err" "unreachable message"
expect 2 "unknown subcommand" -- psctl frobnicate
expect 2 "missing argument" -- psctl status

expect 0 "cluster up" -- psctl cluster up --servers 1 --workers 2 --bin_dir "$R"
expect 5 "cluster up twice" -- psctl cluster up --servers 1 --workers 1 --bin_dir "$R"
has "already up" "$T/err" "second cluster refused"
expect 0 "cluster status" -- psctl cluster status
has "WORKER" "$T/out" "members listed"
has "ALIVE" "$T/out" "members alive"
has "SERVER .*SERVING" "$T/out" "servers answer the gRPC health check"
has "coordinator 127.0.0.1:[0-9]*: SERVING" "$T/out" "the coordinator answers the gRPC health check"
# Workers register their BLAS core and GEMM probe (no address column).
blas_core=$(awk '$2 == "WORKER" {print $4; exit}' "$T/out")
gemm=$(awk '$2 == "WORKER" {print $5; exit}' "$T/out")
[[ $blas_core =~ ^[A-Za-z0-9_]+$ && $gemm =~ ^[0-9]+\.[0-9]$ ]] ||
  { echo "FAIL: no BLAS core / GEMM GF/s for a worker in:"; cat "$T/out"; fails=$((fails + 1)); }
# Workers poll for their weights unless the cluster has more daemons (here
# 3) than cores: then they are told to sleep at once.
tr '\0' ' ' < "/proc/$(cat "$RUN/pids/worker-0.pid")/cmdline" > "$T/cmdline"
if (( 3 > $(nproc) )); then
  has "--wait_spin_us=0" "$T/cmdline" "no polling on an oversubscribed machine"
elif grep -q -- "--wait_spin_us" "$T/cmdline"; then
  echo "FAIL: --wait_spin_us passed with $(nproc) cores for 3 daemons"; fails=$((fails + 1))
fi

expect 4 "status of an unknown job" -- psctl status job-nope
expect 4 "cancel of an unknown job" -- psctl cancel job-nope

cat > "$T/bad.pbtxt" <<'EOT'
model { mlp { input_dim: 784 num_classes: 10 } }
optimizer {
  learning_rate: -1
}
consistency { model: BSP staleness: 3 }
EOT
expect 5 "bad job spec" -- psctl submit "$T/bad.pbtxt"
has "bad.pbtxt:3: optimizer.learning_rate: must be > 0" "$T/err" "field and line named"
has "consistency.staleness" "$T/err" "every violation named"
printf 'model { mlp { input_dim: 784 \n' > "$T/syntax.pbtxt"
expect 5 "syntax error" -- psctl submit "$T/syntax.pbtxt"
has "syntax.pbtxt:2:1" "$T/err" "line and column"
expect 5 "missing spec file" -- psctl submit "$T/none.pbtxt"
cat > "$T/target.pbtxt" <<'EOT'
model { mlp { input_dim: 784 num_classes: 10 } }
optimizer { learning_rate: 0.1 }
target { metric: "f1" value: 0.5 }
EOT
expect 5 "target in an unknown metric" -- psctl submit "$T/target.pbtxt"
has "target.pbtxt:3: target.metric: unknown metric 'f1'" "$T/err" "metric and line named"

cat > "$T/ok.pbtxt" <<'EOT'
name: "cli"
model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
optimizer { learning_rate: 0.1 }
data { batch_size: 64 max_steps: 30 eval_every_steps: 15 eval_examples: 1000 }
num_workers: 2
EOT
expect 0 "submit --wait" -- psctl submit "$T/ok.pbtxt" --wait
job=$(head -n1 "$T/out")
has "SUCCEEDED" "$T/out" "final state printed"
expect 0 "list" -- psctl list
has "$job" "$T/out" "job listed"
expect 0 "status" -- psctl status "$job"
has "SUCCEEDED" "$T/out" "status shows the state"
has "^metric     test accuracy 0\.[0-9]* (best 0\.[0-9]*, higher is better; [0-9]* evaluations\?, the last of the final model)" "$T/out" "status shows the job's metric, evaluated on the final model"
expect 0 "metrics csv" -- psctl metrics "$job" --format csv
has "job_id,name,step,epoch,time_ms,member_id,value,incarnation" "$T/out" "csv header"
has ",train_loss," "$T/out" "csv rows"
has "^job metric: test accuracy 0\.[0-9]*" "$T/err" "metrics names the job's metric on stderr"
rows=$(wc -l < "$T/out")
# No rollback in this job: superseded points are none.
expect 0 "metrics --include_superseded" -- psctl metrics "$job" --format csv --include_superseded
[[ $(wc -l < "$T/out") == "$rows" ]] ||
  { echo "FAIL: --include_superseded changed the rows of a job without rollbacks"; fails=$((fails + 1)); }
expect 0 "metrics json" -- psctl metrics "$job" --format json
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["series"]["train_loss"]' "$T/out" ||
  { echo "FAIL: metrics json does not parse"; fails=$((fails + 1)); }
expect 2 "metrics bad format" -- psctl metrics "$job" --format xml
expect 0 "events" -- psctl events "$job"
has "RUNNING" "$T/out" "state events"
expect 0 "explain" -- psctl explain "$job"
has "$job" "$T/out" "explain names the job"
expect 0 "compare" -- psctl compare "$job" "$job" --out "$T/cmp"
[[ -s "$T/cmp.png" && -s "$T/cmp.svg" ]] || { echo "FAIL: no plot"; fails=$((fails + 1)); }
has "^metric: test accuracy (higher is better); no target" "$T/out" "compare names the metric"
expect 0 "compare --metric --target" -- psctl compare "$job" --metric rmse --target 0.5 --out "$T/cmp"
has "rmse <= 0.5" "$T/out" "the target in the metric's direction"
[[ -s "$T/cmp-${job//[^a-zA-Z0-9]/_}-rmse.dat" ]] || { echo "FAIL: no rmse data file"; fails=$((fails + 1)); }
expect 5 "compare --metric unknown" -- psctl compare "$job" --metric f1
has "unknown metric 'f1'" "$T/err" "compare names the bad metric"
expect 4 "compare with an unknown job" -- psctl compare "$job" job-nope

# A long job, cancelled: wait reports it with exit 1.
sed 's/max_steps: 30/max_steps: 100000/' "$T/ok.pbtxt" > "$T/long.pbtxt"
expect 0 "submit long" -- psctl submit "$T/long.pbtxt"
long=$(head -n1 "$T/out")
sleep 1
# (The workers' rows appear once the job has them: up to 20 s.)
for _ in $(seq 40); do
  expect 0 "explain a running job" -- psctl explain "$long"
  grep -q "  $blas_core  " "$T/out" && break
  sleep 0.5
done
has "GEMM GF/s  BLAS core" "$T/out" "explain's worker table has the GEMM probe"
has "  $blas_core  " "$T/out" "explain names each worker's BLAS core"
expect 0 "cancel" -- psctl cancel "$long"
expect 1 "wait on a cancelled job" -- psctl wait "$long"
has "CANCELLED" "$T/out" "cancelled state"

expect 0 "cluster down" -- psctl cluster down
expect 3 "list after cluster down" -- psctl list
expect 3 "unreachable coordinator address" -- "$R/tools/psctl/psctl" --coordinator 127.0.0.1:1 --timeout 2 list

echo "$fails failures"
[[ $fails == 0 ]]
