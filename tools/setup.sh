#!/usr/bin/env bash
# Installs the Debian packages this project builds and runs with, only those
# that are missing. Idempotent: a second run installs nothing and takes seconds.
#   tools/setup.sh            build + test + demo dependencies
#   tools/setup.sh --slurm    also the one-node Slurm cluster packages
set -euo pipefail

packages=(
  bazel-bootstrap            # Bazel 4.2.3
  g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev zlib1g-dev
  prometheus-cpp-dev
  dataset-fashion-mnist      # /usr/share/datasets/fashion-mnist
  gnuplot-nox                # psctl compare plots
  libcli11-dev               # psctl subcommands (header-only)
  openssl                    # TLS test certificates
  clang libclang-rt-14-dev   # libFuzzer targets
  libcpp-httplib-dev nlohmann-json3-dev  # the coordinator's dashboard
  libjs-chart.js             # its charts (/usr/share/javascript/chart.js)
  chromium                   # the dashboard's browser test
  python3-dev pybind11-dev   # the Python package's native module
  python3-numpy python3-torch python3-pytest  # the package and its tests
)
if [[ "${1:-}" == "--slurm" ]]; then
  packages+=(slurmctld slurmd slurm-client munge)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all ${#packages[@]} Debian packages present"

# Node packages for the offline Kubernetes manifest validation
# (tools/k8s/validate.js); installs nodejs/npm from Debian if needed.
"$(dirname "$0")/k8s/setup.sh"

