#!/usr/bin/env bash
# Validates the deployment files without a cluster (tools/k8s/validate.js):
#   - configs/k8s (every manifest and the kustomization), the output of
#     `psctl k8s render` (stdout and --out_dir, GPU and CPU workers) against
#     the Kubernetes schemas (npm kubernetes-models, offline);
#   - every --flag our binaries get in those manifests and in the sbatch
#     scripts (the template and `psctl slurm submit --no-submit` output) is a
#     real flag, read from each binary's --helpfull / --help: a flag renamed in
#     code fails here;
#   - negative checks: a schema error, unknown flags, an inconsistent
#     kustomization and a renamed flag in a manifest and in the script must
#     each be caught.
# Skips (with the reason) if node or tools/k8s/node_modules is missing
# (tools/k8s/setup.sh installs it).
#
#   tests/k8s_manifests_test.sh COORDINATOR PS_SERVER PS_WORKER PSCTL
set -uo pipefail

start_s=$SECONDS
log() { echo "k8s_manifests_test: $*"; }

if [[ -n "${TEST_SRCDIR:-}" ]]; then
  root=$TEST_SRCDIR/${TEST_WORKSPACE:-ps}
else
  root=$(cd "$(dirname "$0")/.." && pwd)
fi
TEST_XML_SUITE=k8s_manifests_test
TEST_XML_CASE=ManifestsAndFlags
source "$root/tests/test_xml.sh"
abs() { [[ $1 == /* ]] && echo "$1" || echo "$PWD/$1"; }
coordinator=$(abs "${1:?usage: $0 COORDINATOR PS_SERVER PS_WORKER PSCTL}")
server=$(abs "$2")
worker=$(abs "$3")
psctl=$(abs "$4")

validate_js=$(readlink -f "$root/tools/k8s/validate.js")
node_modules=${PS_K8S_NODE_MODULES:-$(dirname "$validate_js")/node_modules}
if ! command -v node >/dev/null; then
  log "SKIPPED: no node on PATH (Debian: apt-get install nodejs)"
  write_xml skip "no node"
  exit 0
fi
if [[ ! -d $node_modules/kubernetes-models || ! -d $node_modules/js-yaml ]]; then
  log "SKIPPED: $node_modules lacks kubernetes-models/js-yaml (run tools/k8s/setup.sh)"
  write_xml skip "tools/k8s/node_modules missing: run tools/k8s/setup.sh"
  exit 0
fi
export NODE_PATH=$node_modules

tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/k8s-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
bins=(--bin "coordinator=$coordinator" --bin "ps_server=$server"
      --bin "ps_worker=$worker" --bin "psctl=$psctl")
validate() { node "$validate_js" "${bins[@]}" "$@"; }

expect_pass() {  # description args...
  local what=$1; shift
  if out=$(validate "$@" 2>&1); then
    log "ok: $what ($(tail -n1 <<<"$out"))"
  else
    log "FAIL: $what"
    echo "$out" | grep -v '^ok ' | sed 's/^/    /'
    failures=$((failures + 1))
  fi
}
expect_fail() {  # description pattern args...
  local what=$1 pattern=$2; shift 2
  if out=$(validate "$@" 2>&1); then
    log "FAIL: $what: validation passed but must fail"
    failures=$((failures + 1))
  elif grep -qE -- "$pattern" <<<"$out"; then
    log "ok: $what is caught: $(grep -m1 -E -- "$pattern" <<<"$out" | cut -c1-160)"
  else
    log "FAIL: $what: failed without /$pattern/:"
    echo "$out" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
}

if ! "$psctl" --help 2>/dev/null | grep -qE '^ +k8s( |$)'; then
  log "FAIL: psctl has no 'k8s render' (psctl_main.cc must call AddDeployCommands)"
  write_xml fail "psctl has no k8s render"
  exit 1
fi

# ---- what is committed ------------------------------------------------------
expect_pass "configs/k8s and the sbatch template" \
  --shell "$root/configs/slurm/ps_train.sbatch" "$root/configs/k8s"

# ---- what psctl generates ---------------------------------------------------
"$psctl" k8s render --servers 3 --workers 5 --image registry.example/ps:1 \
  --namespace train >"$tmp/render.yaml" || { log "FAIL: psctl k8s render"; failures=$((failures + 1)); }
expect_pass "psctl k8s render (stdout, 3 shards, 5 GPU workers)" "$tmp/render.yaml"
grep -q 'replicas: 3' "$tmp/render.yaml" && grep -q 'replicas: 5' "$tmp/render.yaml" ||
  { log "FAIL: rendered replicas"; failures=$((failures + 1)); }
"$psctl" k8s render --servers 1 --workers 2 --gpus-per-worker 0 \
  --job "$root/configs/fashion_mnist_asp.pbtxt" --out_dir "$tmp/render-cpu" >/dev/null 2>&1
rc=$?
if ((rc == 5)); then
  # fashion_mnist_asp.pbtxt asks for more workers than 2: refused, as it must be.
  log "ok: render refuses a job spec needing more workers than deployed"
else
  log "FAIL: render with a job needing more workers exited $rc, want 5"
  failures=$((failures + 1))
fi
"$psctl" k8s render --servers 1 --workers 4 --gpus-per-worker 0 \
  --job "$root/configs/fashion_mnist_asp.pbtxt" --out_dir "$tmp/render-cpu" >/dev/null ||
  { log "FAIL: psctl k8s render --out_dir"; failures=$((failures + 1)); }
expect_pass "psctl k8s render --out_dir (CPU workers, own job spec)" "$tmp/render-cpu"
if [[ ! -f $tmp/render-cpu/00-namespace.yaml ]]; then
  log "FAIL: render --out_dir: no 00-namespace.yaml (kubectl apply -f DIR needs it first)"
  failures=$((failures + 1))
fi
if ! grep -q -- '--device=cpu' "$tmp"/render-cpu/*-worker.yaml || grep -q 'nvidia.com/gpu:' "$tmp"/render-cpu/*-worker.yaml; then
  log "FAIL: the CPU render's workers still use GPUs"
  failures=$((failures + 1))
fi

for g in 0 2; do
  "$psctl" slurm submit "$root/configs/fashion_mnist_bsp.pbtxt" --servers 2 --workers 4 \
    --gpus-per-worker "$g" --partition gpu --output_dir "$tmp/slurm-$g" \
    --bin_dir /opt/ps/bin --no-submit >/dev/null ||
    { log "FAIL: psctl slurm submit --no-submit"; failures=$((failures + 1)); }
  expect_pass "generated sbatch script (gpus-per-worker $g)" --shell "$tmp/slurm-$g/ps_train.sbatch"
done

# ---- negative checks ----------------------------------------------------------
td=$root/tools/k8s/testdata
expect_fail "a schema error" 'schema: .*replicas must be integer' "$td/bad_schema.yaml"
expect_fail "an unknown daemon flag" '--prot is not a flag of coordinator' "$td/bad_flag.yaml"
expect_fail "an unknown psctl flag in a shell script" '--tokenfile is not a flag of psctl' "$td/bad_flag.yaml"
expect_fail "an inconsistent kustomization" 'PS_WORKERS of ps-submit is 2 but ps-worker has 4' \
  "$(readlink -f "$td/bad_kustomization/kustomization.yaml")"
mkdir -p "$tmp/renamed"
sed 's/--data_dir=/--datadir=/' "$root/configs/k8s/coordinator.yaml" >"$tmp/renamed/coordinator.yaml"
expect_fail "a renamed flag in a manifest" '--datadir is not a flag of coordinator' "$tmp/renamed"
sed 's/--port_file=/--portfile=/' "$tmp/slurm-0/ps_train.sbatch" >"$tmp/renamed.sbatch"
expect_fail "a renamed flag in the sbatch script" '--portfile is not a flag of (coordinator|ps_server)' \
  --shell "$tmp/renamed.sbatch"
sed 's/--cpu_threads=/--cputhreads=/' "$tmp/slurm-2/ps_train.sbatch" >"$tmp/renamed2.sbatch"
expect_fail "a renamed worker flag in the sbatch script" '--cputhreads is not a flag of ps_worker' \
  --shell "$tmp/renamed2.sbatch"

if ((failures)); then
  log "$failures check(s) failed"
  write_xml fail "$failures check(s) failed"
  exit 1
fi
log "PASSED ($((SECONDS - start_s)) s)"
write_xml pass ""
