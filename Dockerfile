# The ps image: coordinator, ps_server, ps_worker and psctl in /opt/ps/bin,
# the Python package `ps` (with its native module) in /opt/ps/bin/python,
# where ps_worker finds it for a job's python.script, with python3, numpy
# and torch (docs/python.md), its examples in /opt/ps/examples/python, the
# Fashion-MNIST dataset, a non-root user (uid 10001). Used by the
# Kubernetes manifests (configs/k8s: image ps-train) and usable on Slurm nodes
# through a container runtime (Pyxis/enroot, Apptainer).
#
#   docker build -t ps-train:latest .
#   docker run --rm ps-train:latest psctl --help
#   docker run --rm --gpus all ps-train:latest \
#     sh -c 'psctl cluster up --servers 1 --workers 1 --bin_dir /opt/ps/bin &&
#            psctl submit /opt/ps/configs/fashion_mnist_bsp.pbtxt --wait'
#
# NOT BUILT IN CI: the project's machines have no container engine. What CI
# does check is everything the image runs: the same Bazel targets, the same
# packages (tools/setup.sh), the manifests that reference /opt/ps/bin
# (tests/k8s_manifests_test.sh checks their flags against these binaries).
#
# CUDA_TAG must match the toolkit the code is tested with (CUDA 13.0 here;
# the build emits sm_80 and sm_90 code plus compute_90 PTX).
ARG CUDA_TAG=13.0.0
ARG UBUNTU=ubuntu24.04

# ---- build: Bazel 4.2.3 offline from distribution packages + nvcc ----------
FROM nvidia/cuda:${CUDA_TAG}-devel-${UBUNTU} AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
# The package list is tools/setup.sh's, so the image builds with what CI uses.
COPY tools/setup.sh tools/setup.sh
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ca-certificates \
 && tools/setup.sh && rm -rf /var/lib/apt/lists/*
COPY WORKSPACE BUILD.bazel .bazelrc .bazelignore ./
COPY proto proto
COPY common common
COPY kernels kernels
COPY server server
COPY worker worker
COPY tools tools
COPY configs configs
COPY examples examples
# The native module compiles against this image's Python headers
# (tools/bazel/system.BUILD names Debian 12's python3.11).
RUN py=$(python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])') \
 && sed -i "s/python3\.11/$py/g" tools/bazel/system.BUILD \
 && bazel build //tools/psctl:psctl //server/coordinator:coordinator \
      //server:ps_server //worker:ps_worker //worker/python:package \
 && mkdir -p /opt/ps/bin/python/ps /opt/ps/configs /opt/ps/examples \
 && bin=$(bazel info bazel-bin) \
 && cp "$bin/tools/psctl/psctl" "$bin/server/coordinator/coordinator" \
       "$bin/server/ps_server" "$bin/worker/ps_worker" /opt/ps/bin/ \
 && cp worker/python/ps/*.py "$bin/worker/python/ps/_native.so" /opt/ps/bin/python/ps/ \
 && cp -r examples/python /opt/ps/examples/ \
 && cp -r configs/*.pbtxt configs/slurm configs/k8s /opt/ps/configs/ \
 && rm -f /opt/ps/configs/*/BUILD.bazel /opt/ps/examples/python/BUILD.bazel \
 # The distribution packages the binaries link against, for the runtime stage
 # (CUDA's own libraries come with the runtime image).
 && ldd /opt/ps/bin/psctl /opt/ps/bin/coordinator /opt/ps/bin/ps_server \
        /opt/ps/bin/ps_worker /opt/ps/bin/python/ps/_native.so \
    | awk '/=> \// {print $3}' | sort -u \
    | while read -r p; do dpkg -S "$p" || dpkg -S "/usr$p" || dpkg -S "$(readlink -f "$p")"; done 2>/dev/null \
    | cut -d: -f1 | sort -u | grep -vE 'cuda|cublas' >/opt/ps/runtime-packages.txt \
 && cat /opt/ps/runtime-packages.txt

# ---- run: CUDA runtime (cudart, cuBLAS) + the shared libraries ---------------
FROM nvidia/cuda:${CUDA_TAG}-runtime-${UBUNTU}
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /opt/ps /opt/ps
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      $(cat /opt/ps/runtime-packages.txt) \
      dataset-fashion-mnist gnuplot-nox ca-certificates \
      python3 python3-numpy python3-torch \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 ps \
 && useradd --uid 10001 --gid 10001 --create-home --shell /bin/bash ps \
 && mkdir -p /var/lib/ps && chown ps:ps /var/lib/ps \
 && /opt/ps/bin/psctl --help >/dev/null \
 && { /opt/ps/bin/coordinator --helpfull >/dev/null || test $? -eq 1; } \
 && PYTHONPATH=/opt/ps/bin/python python3 -c 'import ps, ps.torch'
ENV PATH=/opt/ps/bin:$PATH
# Hand-started Python workers (ps_worker adds it for python.script itself).
ENV PYTHONPATH=/opt/ps/bin/python
USER 10001:10001
WORKDIR /home/ps
# Daemon ports used by configs/k8s: coordinator 7000, ps_server 7100,
# Prometheus /metrics 9100.
EXPOSE 7000 7100 9100
CMD ["psctl", "--help"]
