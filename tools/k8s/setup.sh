#!/usr/bin/env bash
# Installs what tests/k8s_manifests_test.sh needs to validate the Kubernetes
# manifests offline: the npm packages kubernetes-models and js-yaml, pinned by
# package-lock.json, into tools/k8s/node_modules (ignored by git). Installs
# Debian's nodejs and npm first if there is no npm. Idempotent: a second run
# only checks.
set -euo pipefail
cd "$(dirname "$0")"

want_models=$(sed -n 's/.*"kubernetes-models": "\(.*\)".*/\1/p' package.json)
have_models=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' node_modules/kubernetes-models/package.json 2>/dev/null || true)
if [[ -n $have_models && $have_models == "$want_models" && -f node_modules/js-yaml/package.json ]]; then
  echo "k8s setup: node_modules present (kubernetes-models $have_models)"
  exit 0
fi

if ! command -v npm >/dev/null; then
  echo "k8s setup: installing nodejs and npm"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
echo "k8s setup: npm ci in tools/k8s"
npm ci --no-audit --no-fund --loglevel=error
echo "k8s setup: done"
