#!/usr/bin/env bash
# train_bench runs and reports, against a shard in the bench's own process
# and against a ps_server process (--server, with the cluster token), and
# stops with a clear error when the server refuses its token or is not
# there. ps_bench runs its ps cases without the ceilings, says how the
# allocator was set up, refuses --pairs without the ceilings, and measures
# a ps_server process (--servers), with workers as threads and as processes
# (--worker_processes), failing clearly on a wrong token; its sparse mode
# does too, each case beside the dense path on the same bytes.
set -euo pipefail
R="${TEST_SRCDIR}/ps"
BENCH="$R/tools/train_bench"
PS_BENCH="$R/tools/ps_bench"
SERVER="$R/server/ps_server"
T="${TEST_TMPDIR}"
fail() { echo "FAIL: $*"; exit 1; }

# In-process shard: the summary has a ratio for the one case.
"$BENCH" --steps=20 --batches=128 --consistency=BSP >"$T/inproc.out" 2>&1 ||
  { cat "$T/inproc.out"; fail "train_bench (in-process shard) failed"; }
grep -Eq '^ +128 BSP +[0-9]+\.[0-9]+ ' "$T/inproc.out" ||
  { cat "$T/inproc.out"; fail "no BSP ratio in the summary"; }

# A ps_server of its own, with a token.
PS_TOKEN=s3cret "$SERVER" --port=0 --port_file="$T/ps.port" \
  >"$T/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -s "$T/ps.port" ]] && break; sleep 0.1; done
[[ -s "$T/ps.port" ]] || { cat "$T/server.log"; fail "ps_server wrote no port"; }
ADDR="127.0.0.1:$(cat "$T/ps.port")"

PS_TOKEN=s3cret "$BENCH" --server="$ADDR" --steps=20 --batches=128 \
  --consistency=BSP,ASP >"$T/remote.out" 2>&1 ||
  { cat "$T/remote.out"; fail "train_bench --server failed"; }
for mode in BSP ASP; do
  grep -Eq "^ +128 $mode +[0-9]+\.[0-9]+ " "$T/remote.out" ||
    { cat "$T/remote.out"; fail "no $mode ratio with --server"; }
done
# The jobs were set up on that server, not in the bench.
grep -Eq "job bench-[0-9]+-1:" "$T/server.log" ||
  { cat "$T/server.log"; fail "the server never saw the bench's first job"; }

# Without the token the server refuses the job: a clear error, exit 1.
if env -u PS_TOKEN "$BENCH" --server="$ADDR" --steps=20 --batches=128 \
  >"$T/noauth.out" 2>&1; then
  cat "$T/noauth.out"; fail "train_bench without the token succeeded"
fi
grep -q "setup: SetupJob: shard $ADDR: missing cluster token" "$T/noauth.out" ||
  { cat "$T/noauth.out"; fail "no clear setup error"; }
# Nothing listening: refused before any measuring.
if "$BENCH" --server=127.0.0.1:1 --steps=20 --batches=128 \
  >"$T/noserver.out" 2>&1; then
  cat "$T/noserver.out"; fail "train_bench with no server succeeded"
fi
grep -q "cannot connect to 127.0.0.1:1" "$T/noserver.out" ||
  { cat "$T/noserver.out"; fail "no clear connect error"; }
if grep -q "none " "$T/noserver.out"; then
  cat "$T/noserver.out"; fail "measured before finding the server gone"
fi
# ps_bench: the ps cases alone, with the allocator tuned and then not.
"$PS_BENCH" --ceilings=false --sizes=4K,1M --shards=1 --workers=1 \
  --seconds_per_case=0.1 >"$T/psb.out" 2>&1 ||
  { cat "$T/psb.out"; fail "ps_bench --ceilings=false failed"; }
grep -q "^Allocator: freed message buffers kept" "$T/psb.out" ||
  { cat "$T/psb.out"; fail "ps_bench does not say the allocator is tuned"; }
grep -Eq '^\| 1 MB \| 1 \| 1 \| [0-9]+\.[0-9]+ \|.*\| - \| - \|$' "$T/psb.out" ||
  { cat "$T/psb.out"; fail "no 1 MB ps case without ratios"; }
if grep -q "Ceilings\|error" "$T/psb.out"; then
  cat "$T/psb.out"; fail "ceilings measured or a case failed"
fi
PS_MALLOC_TUNING=0 "$PS_BENCH" --ceilings=false --sizes=4K --shards=1 \
  --workers=1 --seconds_per_case=0.1 >"$T/psb0.out" 2>&1 ||
  { cat "$T/psb0.out"; fail "ps_bench with PS_MALLOC_TUNING=0 failed"; }
grep -q "^Allocator: glibc's default thresholds" "$T/psb0.out" ||
  { cat "$T/psb0.out"; fail "PS_MALLOC_TUNING=0 not reported"; }
if "$PS_BENCH" --ceilings=false --pairs=1 >"$T/psb2.out" 2>&1; then
  cat "$T/psb2.out"; fail "ps_bench --pairs without ceilings succeeded"
fi
grep -q "pairs needs the ceilings" "$T/psb2.out" ||
  { cat "$T/psb2.out"; fail "no clear --pairs error"; }
"$PS_BENCH" --servers=" , " >"$T/psb5.out" 2>&1 && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "no host:port" "$T/psb5.out" ||
  { cat "$T/psb5.out"; fail "empty --servers: exit $rc, or no clear error"; }

# ps_bench against a ps_server process: each case's job is set up there.
PS_TOKEN=tok3n "$SERVER" --port=0 --port_file="$T/psb.port" \
  >"$T/psb_server.log" 2>&1 &
PSB_SERVER=$!
trap 'kill $PSB_SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$T/psb.port" ] && break; sleep 0.1; done
ADDR="127.0.0.1:$(cat "$T/psb.port")"
PS_TOKEN=tok3n "$PS_BENCH" --servers="$ADDR" --sizes=4K,1M --workers=1,2 \
  --seconds_per_case=0.1 >"$T/psb3.out" 2>&1 ||
  { cat "$T/psb3.out"; fail "ps_bench --servers failed"; }
grep -q "ps_server processes at $ADDR" "$T/psb3.out" ||
  { cat "$T/psb3.out"; fail "the report does not name the server"; }
[ "$(grep -Ec '^\| (4 KB|1 MB) \| 1 \| [12] \| [0-9]+\.[0-9]+ \|' "$T/psb3.out")" = 4 ] ||
  { cat "$T/psb3.out"; fail "not 4 cases against the server"; }
if grep -q "Ceilings\|Server-side apply\|error" "$T/psb3.out"; then
  cat "$T/psb3.out"; fail "local ceilings or apply measured, or a case failed"
fi
[ "$(grep -Ec "job psbench-[0-9]+-[1-4]: shard 0 of 1" "$T/psb_server.log")" = 4 ] ||
  { cat "$T/psb_server.log"; fail "the server did not hold the 4 cases' jobs"; }
# Workers as processes of their own: each case reports every worker's
# GB/s and the workers' CPU per step, and the server holds the jobs.
PS_TOKEN=tok3n "$PS_BENCH" --servers="$ADDR" --sizes=4K,1M --workers=2 \
  --worker_processes --seconds_per_case=0.1 >"$T/psb6.out" 2>&1 ||
  { cat "$T/psb6.out"; fail "ps_bench --worker_processes failed"; }
grep -q "workers as processes of their own" "$T/psb6.out" ||
  { cat "$T/psb6.out"; fail "the report does not say the workers are processes"; }
[ "$(grep -Ec '^\| (4 KB|1 MB) \| 1 \| 2 \| [0-9]+\.[0-9]+ \| [0-9]+\.[0-9]+-[0-9]+\.[0-9]+ \|.*\| [0-9]+\.[0-9]+ \| - \| - \|$' "$T/psb6.out")" = 2 ] ||
  { cat "$T/psb6.out"; fail "not 2 cases with per-worker figures and worker CPU"; }
if grep -q "error" "$T/psb6.out"; then
  cat "$T/psb6.out"; fail "a case with worker processes failed"
fi
[ "$(grep -Ec "job psbench-[0-9]+-[0-9]+: shard 0 of 1" "$T/psb_server.log")" = 6 ] ||
  { cat "$T/psb_server.log"; fail "the server did not hold the 2 process cases' jobs"; }
# Sparse mode against the server, workers as threads and as processes:
# rows/s and GB/s per case, next to the dense path's GB/s for the same
# bytes per step and their ratio.
for procs in false true; do
  PS_TOKEN=tok3n "$PS_BENCH" --mode=sparse --servers="$ADDR" --sparse_dims=8 \
    --sparse_batch=256 --sparse_key_space=100000 --workers=1,2 \
    --worker_processes=$procs --seconds_per_case=0.1 >"$T/sparse_$procs.out" 2>&1 ||
    { cat "$T/sparse_$procs.out"; fail "ps_bench --mode=sparse (processes: $procs) failed"; }
  [ "$(grep -Ec '^\| 8 \| 1 \| [12] \| [0-9]+\.[0-9]+M \|.*\| [0-9]+\.[0-9]+ \| [0-9]+\.[0-9]+x \|$' "$T/sparse_$procs.out")" = 2 ] ||
    { cat "$T/sparse_$procs.out"; fail "not 2 sparse cases with the dense comparison (processes: $procs)"; }
done
PS_TOKEN=wrong "$PS_BENCH" --servers="$ADDR" --sizes=4K --workers=1 \
  --seconds_per_case=0.1 >"$T/psb4.out" 2>&1 && rc=0 || rc=$?
[ "$rc" = 1 ] || { cat "$T/psb4.out"; fail "wrong token: exit $rc, not 1"; }
grep -q "error: SetupJob: shard $ADDR: wrong cluster token" "$T/psb4.out" ||
  { cat "$T/psb4.out"; fail "no clear wrong-token error"; }
echo "PASS"
