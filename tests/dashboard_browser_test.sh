#!/usr/bin/env bash
# The coordinator's dashboard in a real browser: a local cluster (coordinator
# with --http_port, 1 ps_server, 2 CPU ps_workers on loopback) runs an ASP
# job; headless Chromium opens the page as `psctl cluster up` prints it and
# the test reads what it rendered (--dump-dom):
#   1. every member is listed, with the workers' BLAS core; the job is
#      RUNNING, its metric shown, its curves have points;
#   2. after worker-1 is killed (-9): the curves have gained points and the
#      events list the eviction;
#   3. a screenshot of the page is kept as a test output (dashboard.png in
#      bazel-testlogs/tests/dashboard_browser_test/test.outputs/).
# Also over the real port: a wrong token and an unknown job get 401 and 404.
# Skips (reported as skipped in test.xml, with the reason) where Chromium is
# not installed or cannot start. Every wait is bounded.
set -uo pipefail
R="${TEST_SRCDIR}/ps"
PSCTL="$R/tools/psctl/psctl"
RUN="${TEST_TMPDIR}/cluster"
OUT="${TEST_UNDECLARED_OUTPUTS_DIR:-$TEST_TMPDIR}"
start_s=$SECONDS
psctl() { "$PSCTL" --run_dir "$RUN" --timeout 20 "$@"; }
log() { echo "dashboard_browser_test: $(date -u +%H:%M:%S) $*"; }

TEST_XML_SUITE=dashboard_browser_test
TEST_XML_CASE=DashboardInChromium
if [[ -n ${TEST_SRCDIR:-} ]]; then
  source "$TEST_SRCDIR/ps/tests/test_xml.sh"
else
  source "$(dirname "$0")/test_xml.sh"
fi
skip() {
  log "SKIPPED: $*"
  write_xml skip "$*"
  exit 0
}
fail() {
  log "FAIL: $*"
  write_xml fail "$*"
  for f in "$RUN"/logs/*.log; do echo "=== $f"; tail -n 15 "$f"; done
  exit 1
}
trap 'psctl cluster down >/dev/null 2>&1 || true' EXIT

# ---- prerequisites ----------------------------------------------------------
# PS_CHROMIUM names the browser (set empty: as if none were installed).
CHROMIUM=${PS_CHROMIUM-$(command -v chromium || command -v chromium-browser || true)}
[[ -n $CHROMIUM ]] ||
  skip "chromium is not installed (apt-get install chromium; tools/setup.sh)"
export HOME="$TEST_TMPDIR/home"
mkdir -p "$HOME"
browser() {  # browser ARGS... URL: headless, bounded
  timeout 45 "$CHROMIUM" --headless --no-sandbox --disable-gpu \
    --disable-dev-shm-usage --hide-scrollbars --no-first-run \
    --enable-logging=stderr --v=0 \
    --user-data-dir="$TEST_TMPDIR/chrome" "$@" 2>>"$TEST_TMPDIR/chromium.log"
}
browser --dump-dom about:blank | grep -q "<html" ||
  skip "chromium cannot start here: $(tail -n 3 "$TEST_TMPDIR/chromium.log")"

# ---- cluster and job --------------------------------------------------------
up=$(psctl cluster up --restart no --servers 1 --workers 2 --device cpu \
  --bin_dir "$R" --dashboard_port 0 \
  --coordinator_flag=--heartbeat_interval_ms=200 \
  --coordinator_flag=--member_timeout_ms=2000 \
  --worker_flag=--heartbeat_interval_ms=200 \
  --worker_flag=--report_every_steps=50) || fail "cluster up: $up"
echo "$up"
URL=$(sed -n 's/^dashboard: //p' <<<"$up")
[[ $URL == http://127.0.0.1:*/?token=* ]] || fail "no dashboard address in: $up"
BASE=${URL%%\?*}

cat >"$TEST_TMPDIR/job.pbtxt" <<EOT
name: "dashboard-asp"
model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
optimizer { kind: MOMENTUM learning_rate: 0.02 momentum: 0.9 }
consistency { model: ASP heartbeat_timeout_ms: 2000 }
data { batch_size: 64 max_steps: 1000000 eval_every_steps: 1000 eval_examples: 500 }
num_workers: 2
seed: 5
EOT
JOB=$(psctl submit "$TEST_TMPDIR/job.pbtxt" | head -n1)
[[ -n $JOB ]] || fail "submit failed"
log "job $JOB; dashboard $BASE"

# wait_for SECONDS CMD...: until CMD succeeds.
wait_for() {
  local end=$((SECONDS + $1))
  shift
  while ((SECONDS < end)); do "$@" && return 0; sleep 0.3; done
  return 1
}
has_evaluations() {
  psctl metrics "$JOB" --format csv 2>/dev/null | grep -c ',test_accuracy,' |
    awk '{ exit !($1 >= 2) }'
}
wait_for 40 has_evaluations || fail "the job reported no evaluations in 40 s"

# ---- bad input over the real port ------------------------------------------
http_status() {  # http_status URL [TOKEN]: the HTTP status code
  /usr/bin/python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2: req.add_header("X-PS-Token", sys.argv[2])
try:
    print(urllib.request.urlopen(req, timeout=5).status)
except urllib.error.HTTPError as e:
    print(e.code)
PY
}
TOKEN=${URL##*token=}
[[ $(http_status "${BASE}api/jobs" wrong) == 401 ]] || fail "wrong token not 401"
[[ $(http_status "${BASE}api/jobs/no-such-job" "$TOKEN") == 404 ]] ||
  fail "unknown job not 404"
[[ $(http_status "${BASE}api/jobs/$JOB" "$TOKEN") == 200 ]] || fail "job not 200"

# ---- 1. the page while the job runs -----------------------------------------
dom() {  # dom FILE [QUERY]: the page as Chromium rendered it after its first
  # updates
  browser --virtual-time-budget=3000 --dump-dom "$URL&job=$JOB${2:-}" >"$1"
  grep -q 'members alive' "$1" || fail "page did not load its data: $(
    grep -o '<span id="status"[^<]*' "$1")"
  ! grep 'CONSOLE.*Uncaught' "$TEST_TMPDIR/chromium.log" ||
    fail "the page's script failed (above)"
}
points() {  # points FILE ATTR: data-ATTR of the curve info
  grep -o "data-$2=\"[0-9]*\"" "$1" | grep -o '[0-9]*' | head -n1
}
dom "$TEST_TMPDIR/page1.html"
P="$TEST_TMPDIR/page1.html"
# Every member the API lists has a row: its id, role and, for workers, the
# BLAS core and GEMM probe they registered with.
check_members() {  # check_members PAGE
  /usr/bin/python3 - "$1" "${BASE}api/members" "$TOKEN" <<'PY'
import html.parser, json, sys, urllib.request
class Rows(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.rows = []; self.table = None; self.cell = None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table": self.table = a.get("id")
        if tag == "tr" and self.table == "members": self.rows.append([])
        if tag == "td" and self.table == "members": self.cell = ""
    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.rows[-1].append(self.cell); self.cell = None
    def handle_data(self, data):
        if self.cell is not None: self.cell += data
page = Rows(); page.feed(open(sys.argv[1]).read())
rows = {r[0]: r for r in page.rows if r}
req = urllib.request.Request(sys.argv[2], headers={"X-PS-Token": sys.argv[3]})
members = json.load(urllib.request.urlopen(req, timeout=5))["members"]
for m in members:
    r = rows.get(str(m["member_id"]))
    if r is None: sys.exit(f"member {m['member_id']} not on the page")
    if r[1] != m["role"].lower(): sys.exit(f"member {m['member_id']}: role {r[1]}")
    gflops = m["gemm_gflops"]
    if m["role"] == "WORKER" and (r[5] != (m["blas_core"] or "-") or
                                  r[6] != (f"{gflops:.1f}" if gflops > 0 else "-")):
        sys.exit(f"worker {m['member_id']}: BLAS {r[5]} {r[6]}, API {m}")
    print(f"member {m['member_id']} {r[1]} listed: {' | '.join(r[2:])}")
if len(members) != 3: sys.exit(f"{len(members)} members, 3 expected")
PY
}
check_members "$P" || fail "members on the page do not match /api/members"
grep -q "<tr data-job=\"$JOB\" data-state=\"RUNNING\"" "$P" ||
  fail "job $JOB not shown RUNNING"
grep -q '<td class="num metric">accuracy 0\.[0-9]*' "$P" ||
  fail "the job's metric is not shown"
m1=$(points "$P" metric-points)
l1=$(points "$P" loss-points)
log "page 1: curves: $m1 evaluations, $l1 training losses"
((m1 >= 2 && l1 >= 2)) || fail "curves without points ($m1, $l1)"

# ---- 2. a worker killed: more points, and an event --------------------------
kill -9 "$(cat "$RUN/pids/worker-1.pid")"
evicted() { psctl events "$JOB" | grep -q evicted; }
wait_for 30 evicted || fail "worker-1 not evicted within 30 s"
more_points() {
  psctl metrics "$JOB" --format csv 2>/dev/null | grep -c ',train_loss,' |
    awk -v l="$l1" '{ exit !($1 > l + 5) }'
}
wait_for 20 more_points || fail "no new training-loss points in 20 s"
dom "$TEST_TMPDIR/page2.html" "&compare=$JOB"
P="$TEST_TMPDIR/page2.html"
m2=$(points "$P" metric-points)
l2=$(points "$P" loss-points)
log "page 2: curves: $m2 evaluations, $l2 training losses"
((l2 > l1)) || fail "the training-loss curve did not gain points ($l1 -> $l2)"
((m2 >= m1)) || fail "the metric curve lost points ($m1 -> $m2)"
grep -q '<tr data-kind="evicted">' "$P" || fail "no eviction in the events"
grep -q 'data-state="DEAD"' "$P" || fail "the killed worker is not shown dead"
grep -q "<p id=\"compare-info\"[^>]*>1 job(s): $JOB<" "$P" ||
  fail "the comparison does not show $JOB"

# ---- 3. screenshot ----------------------------------------------------------
browser --window-size=1400,2600 --run-all-compositor-stages-before-draw \
  --virtual-time-budget=3000 --screenshot="$OUT/dashboard.png" \
  "$URL&job=$JOB&compare=$JOB" >/dev/null
size=$(stat -c %s "$OUT/dashboard.png" 2>/dev/null || echo 0)
((size > 20000)) || fail "screenshot missing or blank ($size bytes)"
cp "$TEST_TMPDIR/page2.html" "$OUT/dashboard_dom.html"
psctl cancel "$JOB" >/dev/null 2>&1 || true
log "PASS in $((SECONDS - start_s)) s (screenshot $OUT/dashboard.png)"
write_xml pass ""
