"""Faults with Python workers started by ps_worker (python { script }):
kill -9 of one worker's Python process mid-job (its ps_worker reports the
failure, the worker leaves the job and the survivor trains its leftover
data) and of a shard (the job rolls back to its checkpoint, ps_worker
starts the script again) both end in SUCCEEDED."""

import os
import re
import signal
import subprocess
import time

from conftest import Cluster
from test_ctr import EXAMPLES, click_log, with_data  # noqa: F401 (fixture)


def spec_for(d, consistency, extra=""):
    with open(os.path.join(EXAMPLES, "ctr_fm_bsp.pbtxt"), encoding="utf-8") as f:
        spec = with_data(f.read(), d).replace("epochs: 3", "epochs: 6")
    script = os.path.join(EXAMPLES, "ctr_fm.py")
    spec = re.sub(r"^python \{\}.*$", f'python {{ script: "{script}" }}', spec, flags=re.M)
    return spec.replace("model: BSP", f"model: {consistency}") + extra


def step_of(cluster, job_id):
    out = cluster.psctl("status", job_id, check=False).stdout
    m = re.search(r"progress\s+step (\d+)/", out)
    return int(m.group(1)) if m else 0


def wait_step(cluster, job_id, step, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if step_of(cluster, job_id) >= step:
            return
        time.sleep(0.05)
    raise AssertionError(f"{job_id} did not reach step {step}\n{cluster.logs()}")


def pid_file(cluster, name):
    with open(os.path.join(cluster.run_dir, "pids", f"{name}.pid"), encoding="utf-8") as f:
        return int(f.read().strip())


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_killed_python_worker_leaves_its_data_to_the_survivor(click_log):  # noqa: F811
    d, _ = click_log
    cluster = Cluster(servers=2, join=False, workers=2)
    try:
        job_id = cluster.submit(spec_for(d, "ASP"))
        wait_step(cluster, job_id, 60)
        # The worker without the evaluator role: its Python child.
        names = [n for n in ("worker-0", "worker-1")
                 if "evaluator" not in open(os.path.join(cluster.run_dir, "logs", f"{n}.log"),
                                            encoding="utf-8").read()]
        victim = children(pid_file(cluster, names[0]))
        assert victim, cluster.logs()
        os.kill(victim[0], signal.SIGKILL)
        assert cluster.wait_state(job_id, timeout_s=240) == "SUCCEEDED", cluster.logs()
        events = cluster.psctl("events", job_id).stdout
        assert "killed by signal 9" in events, events
        assert re.search(r"evicted", events), events
        assert "data_moved" in events or "moved to member" in events, events
    finally:
        cluster.down()


def test_killed_shard_rolls_the_python_job_back(click_log):  # noqa: F811
    d, _ = click_log
    cluster = Cluster(servers=2, join=False, workers=2)
    try:
        job_id = cluster.submit(spec_for(d, "BSP", "checkpoint { every_versions: 40 }\n"))
        wait_step(cluster, job_id, 100)
        os.kill(pid_file(cluster, "server-1"), signal.SIGKILL)  # restarted by psctl
        assert cluster.wait_state(job_id, timeout_s=300) == "SUCCEEDED", cluster.logs()
        events = cluster.psctl("events", job_id).stdout
        assert "rollback" in events, events
        # The scripts stopped for the rollback, not as failures, and ran again.
        assert "worker_failure" not in events, events
        for n in ("worker-0", "worker-1"):
            with open(os.path.join(cluster.run_dir, "logs", f"{n}.log"), encoding="utf-8") as f:
                assert f.read().count("running /usr/bin/python3") >= 2, n
    finally:
        cluster.down()
