"""Faults with Python workers started by ps_worker (python { script }):
kill -9 of one worker's Python process mid-job (its ps_worker reports the
crash, the worker leaves the job, the survivor takes its data, and the
worker rejoins at the current step with the script started again; with
--python_rejoins=0 it leaves for good and the survivor trains the rest)
and of a shard (the job rolls back to its checkpoint, ps_worker starts
the script again) all end in SUCCEEDED."""

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


def wait_every_clock(cluster, job_id, step, timeout_s=120):
    """Until every worker's own clock (psctl explain) reaches `step`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = cluster.psctl("explain", job_id, check=False).stdout
        clocks = [int(m.group(1)) for m in re.finditer(r"^\s+\d+\s+\d+\s+(\d+)\s", out, re.M)]
        if len(clocks) == 2 and min(clocks) >= step:
            return
        time.sleep(0.05)
    raise AssertionError(f"{job_id}: not every worker reached step {step}\n{cluster.logs()}")


def pid_file(cluster, name):
    with open(os.path.join(cluster.run_dir, "pids", f"{name}.pid"), encoding="utf-8") as f:
        return int(f.read().strip())


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def kill_script(cluster):
    """kill -9 of the Python process of the worker without the evaluator
    role; returns that worker's name."""
    names = [n for n in ("worker-0", "worker-1") if "evaluator" not in log_of(cluster, n)]
    victim = children(pid_file(cluster, names[0]))
    assert victim, cluster.logs()
    os.kill(victim[0], signal.SIGKILL)
    return names[0]


def log_of(cluster, name):
    with open(os.path.join(cluster.run_dir, "logs", f"{name}.log"), encoding="utf-8") as f:
        return f.read()


def test_killed_python_worker_rejoins_at_the_current_step(click_log):  # noqa: F811
    d, _ = click_log
    cluster = Cluster(servers=2, join=False, workers=2)
    try:
        job_id = cluster.submit(spec_for(d, "ASP"))
        wait_every_clock(cluster, job_id, 40)
        name = kill_script(cluster)
        assert cluster.wait_state(job_id, timeout_s=240) == "SUCCEEDED", cluster.logs()
        events = cluster.psctl("events", job_id).stdout
        assert "worker_crash" in events and "killed by signal 9" in events, events
        assert "worker_failure" not in events, events
        # Its data went to the survivor from the step its script had
        # reached, and what was left of it came back with the rejoin.
        m = re.search(r"stopped at step (\d+)", events)
        assert m and int(m.group(1)) >= 40, events
        assert re.search(r"rejoined", events), events
        # Every batch was applied: the shards took the pushes of the new
        # script (numbered from 1 again) as new, not as retries of the old
        # one's. The batches the old one trained after the last clock it
        # reported (a heartbeat's worth) are trained again.
        status = cluster.psctl("status", job_id).stdout
        batches = int(re.search(r"data\s+(\d+)/", status).group(1)) // 256
        versions = [int(v) for v in re.findall(r"shard_summary\s+shard \d+: version (\d+)", events)]
        assert len(versions) == 2, events
        assert all(batches <= v <= batches + 150 for v in versions), (versions, batches)
        log = log_of(cluster, name)
        assert "leaving the job to rejoin it" in log, log
        assert log.count("running /usr/bin/python3") >= 2, log
    finally:
        cluster.down()


def test_python_worker_out_of_rejoins_leaves_its_data_to_the_survivor(click_log):  # noqa: F811
    d, _ = click_log
    cluster = Cluster(servers=2, join=False, workers=2, worker_flags=["--python_rejoins=0"])
    try:
        job_id = cluster.submit(spec_for(d, "ASP"))
        wait_step(cluster, job_id, 60)
        kill_script(cluster)
        assert cluster.wait_state(job_id, timeout_s=240) == "SUCCEEDED", cluster.logs()
        events = cluster.psctl("events", job_id).stdout
        assert "worker_failure" in events and "killed by signal 9" in events, events
        assert re.search(r"evicted", events), events
        assert "data_moved" in events or "moved to member" in events, events
        assert "rejoined" not in events, events
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
            assert log_of(cluster, n).count("running /usr/bin/python3") >= 2, n
    finally:
        cluster.down()
