"""A local cluster (coordinator + shards, no ps_worker) for the package's
tests, through `psctl cluster up --workers 0`; the test process joins it as
the only worker.

Binaries: PS_BIN_DIR (Bazel's runfiles root in `bazel test`), else the
source tree's bazel-bin.
"""

import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # worker/python: the ps package

import ps  # noqa: E402


def _bin_dir():
    d = os.environ.get("PS_BIN_DIR")
    if d:
        return d
    return os.path.join(os.path.dirname(os.path.dirname(HERE)), "..", "bazel-bin")


class Cluster:
    def __init__(self, servers, join=True, workers=0, worker_flags=()):
        self.bin_dir = os.path.realpath(_bin_dir())
        self.psctl_path = os.path.join(self.bin_dir, "tools", "psctl", "psctl")
        self.tmp = tempfile.mkdtemp(prefix="ps-py-", dir=os.environ.get("TEST_TMPDIR"))
        self.run_dir = os.path.join(self.tmp, "cluster")
        self.jobs = []
        self.psctl(
            "cluster", "up", "--servers", str(servers), "--workers", str(workers),
            "--device", "cpu", "--bin_dir", self.bin_dir,
            "--coordinator_flag=--heartbeat_interval_ms=200",
            *(f"--worker_flag={f}" for f in worker_flags),
        )
        self.env = dict(
            os.environ,
            PS_COORDINATOR_FILE=os.path.join(self.run_dir, "coordinator.addr"),
            PS_TOKEN_FILE=os.path.join(self.run_dir, "token"),
        )
        self.worker = None
        if join:  # this process as the cluster's worker
            self.worker = ps.Worker(
                coordinator_file=self.env["PS_COORDINATOR_FILE"],
                token_file=self.env["PS_TOKEN_FILE"],
                heartbeat_s=0.2,
            )

    def psctl(self, *args, check=True):
        # Daemons started here inherit it: ps_worker passes it on to the
        # Python entrypoints it starts.
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        r = subprocess.run(
            [self.psctl_path, "--run_dir", self.run_dir, "--timeout", "20", *args],
            capture_output=True, text=True, timeout=120, env=env,
        )
        if check and r.returncode != 0:
            raise AssertionError(
                f"psctl {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
            )
        return r

    def submit(self, spec_text):
        path = os.path.join(self.tmp, f"job{time.monotonic_ns()}.pbtxt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(spec_text)
        job_id = self.psctl("submit", path).stdout.split()[0]
        self.jobs.append(job_id)
        return job_id

    def state(self, job_id):
        out = self.psctl("status", job_id).stdout
        m = re.search(r"^state\s+(\w+)", out, re.M)
        return m.group(1) if m else out

    def wait_state(self, job_id, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s = self.state(job_id)
            if s in ("SUCCEEDED", "FAILED", "CANCELLED"):
                return s
            time.sleep(0.2)
        return self.state(job_id)

    def logs(self):
        d = os.path.join(self.run_dir, "logs")
        out = []
        for job_id in self.jobs:
            r = self.psctl("events", job_id, check=False)
            out.append(f"== events of {job_id}\n{r.stdout}{r.stderr}")
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), encoding="utf-8", errors="replace") as f:
                out.append(f"== {name}\n" + f.read()[-3000:])
        return "\n".join(out)

    def down(self):
        if self.worker is not None:
            self.worker.close()
        self.psctl("cluster", "down", check=False)


def generator(name):
    """tools/data/<name> of this build."""
    gen = os.path.join(_bin_dir(), "tools", "data", name)
    if not os.path.exists(gen):
        gen = os.path.join(os.path.dirname(os.path.dirname(HERE)), "..", "bazel-bin",
                           "tools", "data", name)
    return gen


def status_of(cluster, job_id):
    """A finished job's (test AUC, examples/s) from psctl status."""
    status = cluster.psctl("status", job_id).stdout
    auc = re.search(r"test auc\s+([0-9.]+)", status, re.I)
    rate = re.search(r"throughput\s+([0-9.]+) examples/s", status)
    assert auc and rate, status
    return float(auc.group(1)), float(rate.group(1))


@pytest.fixture(scope="session")
def cluster():
    c = Cluster(servers=int(os.environ.get("PS_TEST_SERVERS", "2")))
    yield c
    c.down()
